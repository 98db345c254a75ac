"""backfill: the audit log and search index, repaired from PostgreSQL."""
