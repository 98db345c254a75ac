"""Hooks (the provider layout): the watch service, the pipeline's PostgreSQL run tables, and the
landing zone's storage as an Airflow connection names it."""
