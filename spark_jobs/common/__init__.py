"""What the Spark jobs share: session building, JDBC access, schemas, status values and the
PostgreSQL result tables."""
