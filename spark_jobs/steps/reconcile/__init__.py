"""reconcile: source records and gaps (PostgreSQL) against deliveries, one status per seq."""
