"""What the Spark jobs share: session building, JDBC access, schemas, status values, the
warehouse (layout version, batches, audit-log partition swaps, filesystem operations) and the
jobs' access to the run tables (SQL in ``watch_service.store.runs``)."""
