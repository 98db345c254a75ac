"""PostgreSQL access only: migrations, the topic log (L1/L2), sessions, authorization data."""
