"""PySpark jobs of the reconciliation pipeline: compact -> reconcile -> backfill -> verify,
incremental: each run costs what its interval brought, never the whole history.

Each job is a package under ``steps/`` with a pure ``transforms.py`` (DataFrame -> DataFrame) and a
``main.py`` whose ``run(spark, args) -> dict`` does the step with any SparkSession (classic or
Spark Connect: no SparkContext, JVM handles, RDDs or Python UDFs) and whose ``main()`` only
parses flags, builds a session and calls ``run`` (what ``spark-submit`` runs). What the jobs
share lives in ``common/``; the warehouse (its layout, schemas, tables and readers) in
``warehouse/``, its one owner; ``runner.py`` is
``auditsync pipeline run|audit``. The run tables' SQL is ``watch_service.store.runs``.
"""
