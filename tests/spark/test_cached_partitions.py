"""A step's cached DataFrame has the partitions its rows need, not Spark's 200 shuffle
partitions: the jobs' sessions let adaptive execution size a cached plan's partitions too
(``session.BASE_CONF``). With Spark's default a small run's cached frames each ran 200-task
stages that did almost nothing: bench/pipeline.py's backfill of 2,000 new records took 13.6 s,
2.8 s with it."""

from __future__ import annotations

import contextlib

import pytest
from pyspark.sql import functions as F

from spark_jobs.common import step_cache
from spark_jobs.common.session import BASE_CONF

pytestmark = pytest.mark.spark
SETTING = "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning"


@contextlib.contextmanager
def settings(spark, values: dict[str, str]):
    before = {key: spark.conf.get(key) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def cached_partitions(spark) -> int:
    with step_cache.step():
        counts = step_cache.cache(spark.range(2000).groupBy((F.col("id") % 37).alias("k")).count())
        assert counts.count() == 37
        return counts.rdd.getNumPartitions()


def test_a_cached_aggregate_of_a_few_rows_is_not_200_partitions(spark):
    assert BASE_CONF[SETTING] == "true"
    assert spark.conf.get(SETTING) == "true"
    # Spark's defaults otherwise (this layer's shared session runs 2 partitions without AQE).
    spark_defaults = {"spark.sql.shuffle.partitions": "200", "spark.sql.adaptive.enabled": "true"}
    with settings(spark, spark_defaults):
        assert cached_partitions(spark) == 1
        with settings(spark, {SETTING: "false"}):
            assert cached_partitions(spark) == 200
