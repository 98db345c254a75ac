"""The quality operator with a real Great Expectations context and a real local Spark: bad
outputs fail the task with a readable summary — which expectation, how many rows, examples,
and the link to the Data Docs it has just rebuilt."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowFailException

from auditsync_plugin.operators.pipeline import QualityCheckpointOperator

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.timeout(600)]
TS = 1_750_000_000_000


def _write(folder, rows: dict) -> str:
    folder.mkdir(parents=True)
    pq.write_table(pa.table(rows), folder / "part-0.parquet")
    return str(folder)


def test_bad_outputs_fail_with_a_readable_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", __import__("sys").executable)
    datasets = {
        "deliveries": _write(
            tmp_path / "deliveries",
            {
                "consumer": ["c1", "c1"],
                "frame_no": [1, 2],
                "received_ms": [TS, TS],
                "kind": ["record", "caught-up"],
                "topic": ["t", "t"],
                "seq": [1, None],
                "ts": [TS, None],
                "data": ["{}", None],
                "data_sha256": [None, None],
            },
        ),
        "reconciliation": _write(
            tmp_path / "summary",
            {
                "run_id": ["r"],
                "consumer": ["c1"],
                "topic": ["t"],
                "status": ["delivered"],
                "count": [1],
            },
        ),
        "remaining": _write(
            tmp_path / "remaining",
            {"consumer": ["c1"], "topic": ["t"], "seq": [9], "status": ["phantom"]},
        ),
        "audit_log": _write(
            tmp_path / "audit_log",
            {
                "topic": ["t", "t"],
                "seq": [1, 1],
                "ts": [TS, TS],
                "data": ["{}", "{}"],
                "data_sha256": ["h", "h"],
                "origin": ["delivered", "backfill"],
            },
        ),
    }
    op = QualityCheckpointOperator(
        task_id="quality",
        gx_root=str(tmp_path / "gx"),
        datasets=datasets,
        run_name="r",
        docs_url="http://af/auditsync/docs/index.html",
        spark_master="local[1]",
    )
    with pytest.raises(AirflowFailException) as failed:
        op.execute({})
    lines = str(failed.value).splitlines()
    assert lines[0].startswith("data quality FAILED: ")
    assert (
        "  - deliveries: expect_column_values_to_not_be_null(column='data_sha256', "
        "where kind == 'record'): 1 of 1 rows unexpected, e.g. None"
    ) in lines
    assert (
        "  - remaining: expect_column_values_to_not_be_in_set(column='status', "
        "value_set=['silent_gap', 'mismatch', 'phantom', 'divergent']): 1 of 1 rows unexpected, "
        "e.g. 'phantom'"
    ) in lines
    assert "  - remaining: expect_table_row_count_to_equal(value=0): observed 1" in lines
    assert any(
        x.startswith(
            "  - audit_log: expect_compound_columns_to_be_unique(column_list="
            "['topic', 'seq']): 2 of 2 rows unexpected"
        )
        for x in lines
    )
    assert lines[-1] == "report: http://af/auditsync/docs/index.html"
    assert not any("reconciliation:" in x for x in lines)
    docs = tmp_path / "gx" / "gx" / "uncommitted" / "data_docs" / "local_site"
    assert (docs / "index.html").is_file()
    assert {p.name for p in (docs / "validations").iterdir()} == set(datasets)
    index = (docs / "index.html").read_text()
    assert all(f"validations/{name}/r/" in index for name in datasets)  # built once, after all


def test_a_missing_output_is_named(tmp_path):
    op = QualityCheckpointOperator(
        task_id="quality",
        gx_root=str(tmp_path / "gx"),
        datasets={"audit_log": str(tmp_path / "nope")},
        run_name="r",
    )
    with pytest.raises(AirflowFailException, match=r"no output to validate for audit_log \("):
        op.execute({})


def test_pandas_and_spark_judge_a_slice_alike(tmp_path, monkeypatch):
    """A small slice is validated as a pandas DataFrame (``operators.held``), a large one on
    Spark: the same suites say the same of the same rows either way, nulls in integer columns
    and all."""
    from auditsync_plugin import quality
    from auditsync_plugin.operators.pipeline import held
    from auditsync_plugin.quality_summary import summarize
    from spark_jobs.common import statuses as st
    from spark_jobs.common.session import job_session

    monkeypatch.setenv("PYSPARK_PYTHON", __import__("sys").executable)
    rows = {
        "deliveries": {
            "consumer": ["c1", "c1", "c1"],
            "frame_no": [1, 2, 3],
            "received_ms": [TS, TS, 5],
            "kind": ["record", "caught-up", "record"],
            "topic": ["t", "t", "t"],
            "seq": [1, None, 0],
            "ts": [TS, None, None],
            "data": ["{}", None, "{}"],
            "data_sha256": ["h", None, "h"],
        },
        "reconciliation": {
            "run_id": ["r", "r"],
            "consumer": ["c1", "c1"],
            "topic": ["t", "t"],
            "status": ["delivered", "delivered"],
            "count": [1, -2],
        },
        "audit_log": {
            "topic": ["t", "t"],
            "seq": [0, 0],
            "ts": [TS, TS],
            "data": ["{}", None],
            "data_sha256": ["h", "h"],
            "origin": ["delivered", "elsewhere"],
        },
    }
    paths = {name: _write(tmp_path / name, cols) for name, cols in rows.items()}
    bounds = quality.Bounds(max_ts_ms=TS + 1)
    statuses = (st.SUMMARY_STATUSES, st.DEFECTS, (st.ORIGIN_DELIVERED, st.ORIGIN_BACKFILL))
    texts = {}
    with job_session("quality_engines", master="local[1]") as spark:
        for engine, local_rows in (("pandas", 10), ("pyspark", 1)):
            frames = {n: held(spark.read.parquet(p), local_rows) for n, p in paths.items()}
            assert {type(f).__module__.split(".")[0] for f in frames.values()} == {engine}
            results = quality.run(str(tmp_path / engine), frames, "r", bounds, *statuses)
            texts[engine] = summarize(results, "report").text().splitlines()
    assert texts["pandas"] == texts["pyspark"]
    lines = texts["pandas"]
    assert lines[0] == (
        "data quality FAILED: 22 of 31 expectations met "
        "(deliveries 10/13, reconciliation 6/8, audit_log 6/10)"
    )
    assert (
        "  - deliveries: expect_column_values_to_be_between(column='seq', min_value=1.0, "
        "where kind == 'record'): 1 of 2 rows unexpected, e.g. 0"
    ) in lines
    assert (
        "  - deliveries: expect_column_values_to_not_be_null(column='ts', where kind == 'record'):"
        " 1 of 2 rows unexpected, e.g. None"
    ) in lines
