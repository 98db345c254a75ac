"""The I/O around ``rewind.py``: re-hash the suspect stored ranges in PostgreSQL, compare the
changed ones seq by seq with the earlier verdicts, and hand back the rewound ranges with the
digests the run's commit stores; and the runs the warehouse holds that PostgreSQL forgot.

Two kinds of evidence, reported together: the digests (what changed under an earlier verdict;
every run re-hashes each topic's top range, the pipeline's memory of how far it verified the
source) and the ``rewound`` frames the consumers landed (the service's own word that the
source lost those seqs). The digests live in the pipeline's database; where that is the
source's own (no ``AUDITSYNC_PIPELINE_DATABASE_URL``), a failover takes the digests of the
lost seqs with it (a run that judged them committed after them, so its commit was lost too):
there the frames are the only evidence left, and they name the lost seqs exactly as far as any
consumer was served them.
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
from spark_jobs.warehouse.schemas import struct
from spark_jobs.warehouse.warehouse import Warehouse
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
    warehouse: Warehouse,
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
    tops = runs.top_ranges(conn, warehouse.layout.catalog, heads)
    spans = sorted(set(rewind.suspect_spans(heads, late_runs, told) + tops))
    stored = runs.digests_meeting(conn, warehouse.layout.catalog, spans, source)
    stored += walk_down(conn, source, warehouse.layout.catalog, tops, stored)
    changed = [(t, a, b) for t, a, b, was, now in stored if was != now]
    found: list[tuple[str, int, int]] = []
    if changed:
        found = _compare(spark, warehouse, target, heads, changed, run_order)
    return Rewinds(
        rewind.merge(found),
        [(t, a, b, now) for t, a, b, was, now in stored if was != now],
        len(stored),
        rewind.merge(found + said),
    )


def walk_down(
    conn: Any,
    source: Any,
    warehouse: str,
    tops: list[tuple[str, int, int]],
    stored: list[tuple[str, int, int, str, str | None]],
    batch: int = 16,
) -> list[tuple[str, int, int, str, str | None]]:
    """The stored ranges below a topic's changed top range, re-hashed highest first until one
    hashes as judged: a restore loses a suffix of the source, so the top of what the pipeline
    verified shows it whatever the consumers were told, and the ranges under it say how far
    down it reaches. Returns the ranges re-hashed that ``stored`` does not hold."""
    seen = {(t, a, b) for t, a, b, _, _ in stored}
    was = {(t, a, b): (d, now) for t, a, b, d, now in stored}
    out = []
    for topic, a, b in tops:
        digest, now = was[(topic, a, b)]
        if digest == now:
            continue
        below = min(x for t, x, _, d, n in stored if t == topic and d != n)
        while below > 0:
            ranges = runs.ranges_below(conn, warehouse, topic, below, batch)
            hashed = runs.ranges_now(source, [(topic, lo, hi) for lo, hi, _ in ranges])
            for (lo, hi, d), (n, _) in zip(ranges, hashed, strict=True):
                if (topic, lo, hi) not in seen:
                    out.append((topic, lo, hi, d, n))
                if d == n:
                    below = 0
                    break
            else:
                below = ranges[-1][0] if len(ranges) == batch else 0
    return out


def earlier_verdicts(
    spark: SparkSession, warehouse: Warehouse, run_order: dict[str, tuple[int, Any]]
) -> DataFrame:
    """The committed runs' detail rows with ``order``, the run's last batch (newest wins)."""
    order = local_rows.frame(spark, [(r, b) for r, (b, _) in run_order.items()], RUN_ORDER)
    return warehouse.runs_rows("detail", sorted(run_order)).join(
        F.broadcast(order), on="run_id", how="inner"
    )


def unknown_runs(warehouse: Warehouse, committed: set[str]) -> list[str]:
    """Runs whose verdicts the warehouse holds but PostgreSQL's run tables do not know: the
    database went back (a restore, a failover) while the warehouse kept them (or a run
    crashed between its table writes and its commit, and was never re-run)."""
    held = warehouse.partition_runs("summary")
    return sorted(held - committed - {warehouse.layout.run_id})


def _compare(
    spark: SparkSession,
    warehouse: Warehouse,
    target: jdbc.JdbcTarget,
    heads: dict[str, int],
    changed: list[tuple[str, int, int]],
    run_order: dict[str, tuple[int, Any]],
) -> list[tuple[str, int, int]]:
    spans = local_rows.frame(spark, changed, rewind.RANGES)
    topics = sorted({t for t, _, _ in changed})
    earlier = (
        earlier_verdicts(spark, warehouse, run_order)
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
