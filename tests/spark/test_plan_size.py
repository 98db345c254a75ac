"""``spark_jobs.common.plan_size``: which steps run interpreted, and that the session gets its
own settings back."""

from __future__ import annotations

import pytest

from spark_jobs.common import plan_size

from . import places


@pytest.mark.unit
def test_only_a_known_small_count_runs_interpreted():
    assert plan_size.interpreted(0) is True
    assert plan_size.interpreted(plan_size.SMALL_ROWS - 1) is True
    assert plan_size.interpreted(plan_size.SMALL_ROWS) is False
    assert plan_size.interpreted(None) is False


@pytest.mark.unit
def test_a_known_small_read_gets_one_partition():
    assert plan_size.partitions(0, 4) == 1
    assert plan_size.partitions(plan_size.SMALL_ROWS - 1, 4) == 1
    assert plan_size.partitions(plan_size.SMALL_ROWS, 4) == 4
    assert plan_size.partitions(None, 4) == 4


@pytest.mark.spark
def test_sized_interprets_inside_and_puts_the_settings_back(spark):
    keys = sorted(plan_size.INTERPRETED)
    with places.shipped_settings(spark):
        shipped = {k: spark.conf.get(k) for k in keys}
        assert shipped == {
            "spark.sql.codegen.factoryMode": "FALLBACK",
            "spark.sql.codegen.wholeStage": "true",
        }
        with plan_size.sized(spark, 10) as interpreted:
            assert interpreted is True
            assert {k: spark.conf.get(k) for k in keys} == plan_size.INTERPRETED
            assert spark.range(5).selectExpr("sum(id * 2)").first()[0] == 20
        assert {k: spark.conf.get(k) for k in keys} == shipped
        with plan_size.sized(spark, plan_size.SMALL_ROWS) as interpreted:
            assert interpreted is False
            assert {k: spark.conf.get(k) for k in keys} == shipped
        with pytest.raises(RuntimeError, match="inside"), plan_size.sized(spark, 1):
            raise RuntimeError("inside")
        assert {k: spark.conf.get(k) for k in keys} == shipped
