"""The I/O around ``rewind.py``: re-hash the suspect stored ranges in PostgreSQL, compare the
changed ones seq by seq with the earlier verdicts, and hand back the rewound ranges with the
digests the run's commit stores; and the runs the warehouse holds that PostgreSQL forgot.

Three kinds of evidence, reported together: the digests (what changed under an earlier verdict;
every run re-hashes each topic's top range, the pipeline's memory of how far it verified the
source), the ``rewound`` frames the consumers landed (the service's own word that the source
lost those seqs) and the watch sessions' cursors below the marks the pipeline keeps of them
(``session_cursors``: a source restored together with its sessions table, above what the
digests cover). The digests live in the pipeline's database; where that is the source's own (no
``AUDITSYNC_PIPELINE_DATABASE_URL``), a failover takes the digests of the lost seqs with it (a
run that judged them committed after them, so its commit was lost too): there the frames are
the only evidence left, and they name the lost seqs exactly as far as any consumer was served
them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType

from spark_jobs.common import jdbc, local_rows
from spark_jobs.common.seq_ranges import seq_runs
from spark_jobs.steps.reconcile import rewind, session_cursors
from spark_jobs.warehouse.schemas import struct
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs, session_marks

# Each committed run and its order: the last batch it read.
RUN_ORDER = struct(("run_id", StringType()), ("order", LongType()))


@dataclasses.dataclass
class Rewinds:
    ranges: rewind.Ranges  # topic -> rewound inclusive ranges the digests found
    digests: list[tuple[str, int, int, str | None]]  # re-hashed stored ranges, digest now
    checked: int  # stored ranges re-hashed
    # topic -> what the run reports: ``ranges``, the landed ``rewound`` frames' ranges and
    # the cursors' (``session_cursors.ranges``)
    reported: rewind.Ranges = dataclasses.field(default_factory=dict)
    # every session's cursors now (the run's commit makes them the marks) and the ones that
    # went back below their marks
    sessions: list[session_marks.Seen] = dataclasses.field(default_factory=list)
    went_back: list[session_cursors.WentBack] = dataclasses.field(default_factory=list)

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
    tracked: Iterable[str] = (),
) -> Rewinds:
    """``signalled``: the run's signalled ranges (tombstones, deletions); ``frames``: the
    ranges of the ``rewound`` frames it consumed (``scope.rewound_frames``); the sessions'
    cursors below their marks on the ``tracked`` topics (the warehouse's). All are suspects;
    the frames' and the cursors' ranges are reported whatever the digests say. The digest
    ranges alone change verdicts (``late.py``): a frame or a cursor says the source lost seqs,
    not that their content changed. ``conn`` reaches the run tables (the stored digests, the
    session marks), ``source`` the source's records and sessions."""
    house = warehouse.layout.catalog
    marks = session_marks.marks(conn, house)
    sessions = session_marks.sessions_now(source, tracked, marks)
    back = session_cursors.went_back(marks, sessions)
    every_top = runs.top_ranges(conn, house, {*tracked, *heads})
    tops = [(t, a, b) for t, a, b in every_top if t in heads]
    said = [(r["topic"], r["range_from"], r["range_to"]) for r in frames or []]
    said += session_cursors.ranges(back, {t: b for t, _, b in every_top})
    told = rewind.merge(
        [(r["topic"], r["range_from"], r["range_to"]) for r in signalled]
        + said
        + [(b.topic, b.cursor + 1, b.mark) for b in back]
    )
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
        sessions,
        back,
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
