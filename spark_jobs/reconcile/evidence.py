"""The I/O around ``rewind.py``: read the heads, re-hash the suspect stored ranges in
PostgreSQL, compare the changed ones seq by seq with the earlier verdicts, and hand back the
rewound ranges with the digests the run's commit stores."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import jdbc, tables
from spark_jobs.layout import Layout
from spark_jobs.reconcile import rewind
from spark_jobs.reconcile.late import seq_runs
from watch_service.store import runs


@dataclasses.dataclass
class Rewinds:
    ranges: rewind.Ranges  # topic -> rewound inclusive ranges
    digests: list[tuple[str, int, int, str | None]]  # re-hashed stored ranges, digest now
    checked: int  # stored ranges re-hashed

    def frame(self, spark: SparkSession) -> DataFrame | None:
        rows = [(t, a, b) for t, rs in self.ranges.items() for a, b in rs]
        return spark.createDataFrame(rows, rewind.RANGES) if rows else None


def find(
    spark: SparkSession,
    conn: Any,
    layout: Layout,
    target: jdbc.JdbcTarget,
    heads: dict[str, int],
    late_runs: list[tuple[str, int, int]],
    deliveries: DataFrame,
    run_order: dict[str, tuple[int, Any]],
) -> Rewinds:
    landed = rewind.merge(
        (r["topic"], r["range_from"], r["range_to"])
        for r in rewind.landed_rewinds(deliveries).collect()
    )
    spans = rewind.suspect_spans(heads, late_runs, landed)
    stored = runs.digests_meeting(conn, layout.catalog, spans)
    changed = [(t, a, b) for t, a, b, was, now in stored if was != now]
    found: list[tuple[str, int, int]] = [(t, a, b) for t, rs in landed.items() for a, b in rs]
    if changed:
        found += _compare(spark, layout, target, heads, changed, run_order)
    return Rewinds(
        rewind.merge(found),
        [(t, a, b, now) for t, a, b, was, now in stored if was != now],
        len(stored),
    )


def _compare(
    spark: SparkSession,
    layout: Layout,
    target: jdbc.JdbcTarget,
    heads: dict[str, int],
    changed: list[tuple[str, int, int]],
    run_order: dict[str, tuple[int, Any]],
) -> list[tuple[str, int, int]]:
    spans = spark.createDataFrame(changed, rewind.RANGES)
    order = spark.createDataFrame(
        [(r, b) for r, (b, _) in run_order.items()], "run_id string, order long"
    )
    topics = sorted({t for t, _, _ in changed})
    earlier = (
        tables.runs_rows(spark, layout, "detail", sorted(run_order))
        .filter(
            F.col("topic").isin(*topics)
            & F.col("seq").between(min(a for _, a, _ in changed), max(b for _, _, b in changed))
            & F.col("source_hash").isNotNull()
        )
        .join(F.broadcast(order), on="run_id", how="inner")
        .select("topic", "seq", "source_hash", "order")
    )
    now = jdbc.read_records_in(spark, target, [(t, a - 1, b) for t, a, b in changed], 1)
    seqs = rewind.rewound_seqs(earlier, now, heads, spans)
    return [(r["topic"], r["lo"] + 1, r["hi"]) for r in seq_runs(seqs).collect()]
