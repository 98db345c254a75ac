"""The I/O around ``rewind.py``: re-hash the suspect stored ranges in PostgreSQL, compare the
changed ones seq by seq with the earlier verdicts, and hand back the rewound ranges with the
digests the run's commit stores; and the runs the warehouse holds that PostgreSQL forgot.

Two kinds of evidence, reported together: the digests (what changed under an earlier verdict)
and the ``rewound`` frames the consumers landed (the service's own word that the source lost
those seqs). A failover of the one PostgreSQL that holds both the source and the run tables
takes the digests of the lost seqs with it (a run that judged them committed after them, so its
commit was lost too): there the frames are the only evidence left, and they name the lost
seqs exactly as far as any consumer was served them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType

from spark_jobs.common import jdbc, local_rows
from spark_jobs.common.seq_ranges import seq_runs
from spark_jobs.steps.reconcile import rewind
from spark_jobs.warehouse import tables
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.schemas import struct
from watch_service.store import runs

# Each committed run and its order: the last batch it read.
RUN_ORDER = struct(("run_id", StringType()), ("order", LongType()))


@dataclasses.dataclass
class Rewinds:
    ranges: rewind.Ranges  # topic -> rewound inclusive ranges the digests found
    digests: list[tuple[str, int, int, str | None]]  # re-hashed stored ranges, digest now
    checked: int  # stored ranges re-hashed
    # topic -> what the run reports: ``ranges`` and the landed ``rewound`` frames' ranges
    reported: rewind.Ranges = dataclasses.field(default_factory=dict)

    def frame(self, spark: SparkSession) -> DataFrame | None:
        rows = [(t, a, b) for t, rs in self.ranges.items() for a, b in rs]
        return local_rows.frame(spark, rows, rewind.RANGES) if rows else None


def find(
    spark: SparkSession,
    conn: Any,
    source: Any,
    layout: Layout,
    target: jdbc.JdbcTarget,
    heads: dict[str, int],
    late_runs: list[tuple[str, int, int]],
    signalled: list,
    run_order: dict[str, tuple[int, Any]],
    frames: list | None = None,
) -> Rewinds:
    """``signalled``: the run's signalled ranges (tombstones, deletions); ``frames``: the
    ranges of the ``rewound`` frames it consumed (``scope.rewound_frames``). Both are suspects;
    the frames' ranges are reported whatever the digests say. The digest ranges alone change
    verdicts (``late.py``): a frame says the source lost seqs, not that their content changed.
    ``conn`` reaches the run tables (the stored digests), ``source`` the source's records."""
    said = [(r["topic"], r["range_from"], r["range_to"]) for r in frames or []]
    told = rewind.merge([(r["topic"], r["range_from"], r["range_to"]) for r in signalled] + said)
    spans = rewind.suspect_spans(heads, late_runs, told)
    stored = runs.digests_meeting(conn, layout.catalog, spans, source)
    changed = [(t, a, b) for t, a, b, was, now in stored if was != now]
    found: list[tuple[str, int, int]] = []
    if changed:
        found = _compare(spark, layout, target, heads, changed, run_order)
    return Rewinds(
        rewind.merge(found),
        [(t, a, b, now) for t, a, b, was, now in stored if was != now],
        len(stored),
        rewind.merge(found + said),
    )


def earlier_verdicts(
    spark: SparkSession, layout: Layout, run_order: dict[str, tuple[int, Any]]
) -> DataFrame:
    """The committed runs' detail rows with ``order``, the run's last batch (newest wins)."""
    order = local_rows.frame(spark, [(r, b) for r, (b, _) in run_order.items()], RUN_ORDER)
    return tables.runs_rows(spark, layout, "detail", sorted(run_order)).join(
        F.broadcast(order), on="run_id", how="inner"
    )


def unknown_runs(spark: SparkSession, layout: Layout, committed: set[str]) -> list[str]:
    """Runs whose verdicts the warehouse holds but PostgreSQL's run tables do not know: the
    database went back (a restore, a failover) while the warehouse kept them (or a run
    crashed between its table writes and its commit, and was never re-run)."""
    table = layout.table("summary")
    rows = spark.sql(f"SELECT DISTINCT partition.run_id AS run_id FROM {table}.partitions")
    return sorted({r["run_id"] for r in rows.collect()} - committed - {layout.run_id})


def _compare(
    spark: SparkSession,
    layout: Layout,
    target: jdbc.JdbcTarget,
    heads: dict[str, int],
    changed: list[tuple[str, int, int]],
    run_order: dict[str, tuple[int, Any]],
) -> list[tuple[str, int, int]]:
    spans = local_rows.frame(spark, changed, rewind.RANGES)
    topics = sorted({t for t, _, _ in changed})
    earlier = (
        earlier_verdicts(spark, layout, run_order)
        .filter(
            F.col("topic").isin(*topics)
            & F.col("seq").between(min(a for _, a, _ in changed), max(b for _, _, b in changed))
            & F.col("source_hash").isNotNull()
        )
        .select("topic", "seq", "source_hash", "order")
    )
    now = jdbc.read_records_in(spark, target, [(t, a - 1, b) for t, a, b in changed], 1)
    seqs = rewind.rewound_seqs(earlier, now, heads, spans)
    return [(r["topic"], r["lo"] + 1, r["hi"]) for r in seq_runs(seqs).collect()]
