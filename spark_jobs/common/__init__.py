"""What the Spark jobs share: session building, JDBC access, schemas, status values, seq
ranges, the warehouse's Iceberg tables (``tables``) and the jobs' access to the run tables (SQL
in ``watch_service.store.runs``)."""
