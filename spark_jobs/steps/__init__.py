"""The pipeline's Spark steps, one package each: ``transforms.py`` (pure) and ``main.py`` (I/O).

A step imports ``spark_jobs.common`` and the modules below it, never another step: what two
steps share lives in ``spark_jobs.common`` (``tests/test_layering.py`` enforces it).
"""
