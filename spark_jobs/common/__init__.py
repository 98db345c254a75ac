"""What the Spark jobs share: session building, JDBC access, status values, seq ranges and the
jobs' access to the run tables (SQL in ``watch_service.store.runs``). The warehouse's Iceberg
tables, schemas and layout are ``spark_jobs.warehouse``."""
