"""PySpark jobs of the reconciliation pipeline: compact -> reconcile -> backfill -> verify.

Each job is a package with a pure ``transforms.py`` (DataFrame -> DataFrame) and a thin
``main.py`` that ``spark-submit`` runs; what the jobs share lives in ``common/``.
"""
