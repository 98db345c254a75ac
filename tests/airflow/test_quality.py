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
