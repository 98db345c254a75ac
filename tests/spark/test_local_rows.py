"""``common.local_rows``: the driver's small row lists reach Spark as Arrow, a local relation
(no pickled RDD for Python workers to unpickle), in exactly the schema asked for, checked."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import Row

from spark_jobs.common import local_rows
from spark_jobs.steps.reconcile.main import HELD
from spark_jobs.steps.reconcile.scope import SCOPE, SIGNALLED
from spark_jobs.warehouse import tables

pytestmark = pytest.mark.spark


def plan(df) -> str:
    return df._jdf.queryExecution().optimizedPlan().toString()


def test_rows_become_a_local_relation_in_the_schema_given(spark):
    df = local_rows.frame(spark, [("c", "t", 1, 2), ("c", "u", 5, 9)], HELD)
    assert plan(df).startswith("LocalRelation [")
    assert df.schema == HELD
    assert [tuple(r) for r in df.collect()] == [("c", "t", 1, 2), ("c", "u", 5, 9)]
    # Rows collected elsewhere are taken by position, as createDataFrame took them.
    rows = [Row(consumer="c", topic="t", range_from=3, range_to=4)]
    assert [tuple(r) for r in local_rows.frame(spark, rows, SIGNALLED).collect()] == [
        ("c", "t", 3, 4)
    ]


def test_every_warehouse_table_schema_has_an_empty_frame(spark):
    for name, spec in tables.SCHEMAS.items():
        df = local_rows.empty(spark, spec[0])
        assert df.schema == spec[0], name
        assert df.count() == 0 and plan(df).startswith("LocalRelation"), name


def test_a_row_that_does_not_fit_the_schema_is_refused(spark):
    with pytest.raises(ValueError, match="non-nullable"):
        local_rows.frame(spark, [(None, "c", "t", 0, 0, 5, None)], SCOPE)  # scope_id not null
    with pytest.raises(ValueError, match="a row of 3 values for 4 columns"):
        local_rows.frame(spark, [("c", "t", 1)], HELD)
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        local_rows.frame(spark, [("c", "t", "one", 2)], HELD)
