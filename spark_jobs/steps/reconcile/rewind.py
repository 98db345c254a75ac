"""A source that went back: the window's cap at the head, per-range digests, and the rewound
ranges a run finds.

Seqs never change (invariant L2), and a topic's head never goes back, except when the source
itself loses acknowledged records (failover to a lagging replica, a restore from a backup)
and then writes the same seqs again with other content. Reconcile must neither trust a head
it has not read nor miss that the source it judged against is gone:

- **The cap.** A window ends at the topic's head read at judgement time (``cap_scope``): a
  consumer's cursor above it (a delivery the source does not have) never moves
  ``reconciled_through`` past the head. Copies above it are judged as ``phantom`` by the late
  path (``late.py``) and again once the head passes them (``revisit.py``).
- **Digests.** Each run keeps one hash per range of the source records it judged
  (``range_digests``: ranges are the judged seqs of a ``BUCKET``-aligned block, the hash
  sha256 over ``"<seq>:<sha256 hex of data>\\n"`` lines in seq order, written once in
  ``watch_service.protocol.hashes`` for Spark, PostgreSQL and Python), stored in
  ``reconcile_digests`` in the run's commit.
- **Evidence.** A later run re-hashes, in PostgreSQL, only the stored ranges that its late
  copies, its landed ``rewound`` frames or a head below them meet (``suspect_spans``), and
  each topic's top range (the pipeline's memory of how far it verified the source: a restore
  loses a suffix, so the top shows it even when no consumer was told or sent a late copy);
  under a changed top range, the ranges below it until one hashes as judged
  (``evidence.walk_down``). Where a
  digest changed, the seqs are compared one by one with the source hash the newest earlier
  verdict holds (``rewound_seqs``): a seq whose content differs now, or that is above the head
  now, was rewound; a seq trimmed since (retention, deletion) was not. The ranges of landed
  ``rewound`` frames are suspects like the others: the digests say exactly which seqs changed.

The cost follows the suspect ranges, not the history: one indexed digest query, one range of at
most ``BUCKET`` seqs per topic of the run, and a seq by seq comparison inside changed ranges
only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_jobs.common.spans import merge as merge_spans
from spark_jobs.warehouse.schemas import SOURCE_RECORDS, conform
from watch_service.protocol import hashes
from watch_service.store.runs import DIGEST_BUCKET

BUCKET = DIGEST_BUCKET
# Above any seq: the open end of "everything above the head".
TOP = 2**62
DIGESTS = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("seq_from", LongType(), False),
        StructField("seq_to", LongType(), False),
        StructField("digest", StringType(), False),
    ]
)
RANGES = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("range_from", LongType(), False),
        StructField("range_to", LongType(), False),
    ]
)
# topic -> merged inclusive ranges
Ranges = dict[str, list[tuple[int, int]]]


def cap_scope(rows: Iterable, heads: Mapping[str, int]) -> list[tuple]:
    """Scope rows (``SCOPE`` order) with each watermark capped at its topic's head and never
    below ``lo``; a topic the source never had has head 0."""
    out = []
    for r in rows:
        mark, lo = r["watermark"], r["lo"]
        if mark is not None:
            mark = min(mark, heads.get(r["topic"], 0))
            mark = mark if lo is None else max(lo, mark)
        out.append(
            (r["scope_id"], r["consumer"], r["topic"], r["start_seq"], lo, mark, r["filter_node"])
        )
    return out


def range_digests(records: DataFrame) -> DataFrame:
    """One digest per (topic, BUCKET-aligned block) of the records: (topic, seq_from, seq_to,
    digest) over the records present, from the first to the last."""
    src = conform(records, SOURCE_RECORDS)
    line = F.expr(hashes.spark_digest_line("seq", "data"))
    blocks = src.groupBy("topic", F.floor(F.col("seq") / BUCKET).alias("block")).agg(
        F.min("seq").alias("seq_from"),
        F.max("seq").alias("seq_to"),
        F.sort_array(F.collect_list(F.struct(F.col("seq"), line.alias("line")))).alias("lines"),
    )
    digest = F.expr(hashes.spark_range_digest("transform(lines, x -> x.line)"))
    return conform(blocks.withColumn("digest", digest), DIGESTS)


def suspect_spans(
    heads: Mapping[str, int],
    late_runs: Iterable[tuple[str, int, int]],
    told: Ranges,
) -> list[tuple[str, int, int]]:
    """Inclusive (topic, lo, hi) spans whose stored digests a run re-checks: above each head,
    the late copies' seq runs (``lo`` exclusive as ``seq_runs`` gives them), the ranges the
    consumers were told of (landed ``rewound`` frames, tombstones)."""
    spans = [(t, h + 1, TOP) for t, h in heads.items()]
    spans += [(t, lo + 1, hi) for t, lo, hi in late_runs]
    spans += [(t, a, b) for t, rs in told.items() for a, b in rs]
    return sorted(set(spans))


def rewound_seqs(
    earlier: DataFrame, now: DataFrame, heads: Mapping[str, int], spans: DataFrame
) -> DataFrame:
    """(topic, seq) rewound inside the changed ``spans`` (topic, range_from, range_to):
    ``earlier`` (topic, seq, source_hash, order) are earlier verdicts' source hashes (the
    highest ``order`` is the newest), ``now`` the source records of those spans now."""
    inside = (
        earlier.join(
            F.broadcast(spans.withColumnRenamed("topic", "s_topic")),
            how="inner",
            on=(
                (F.col("topic") == F.col("s_topic"))
                & F.col("seq").between(F.col("range_from"), F.col("range_to"))
            ),
        )
        .groupBy("topic", "seq")
        .agg(F.max_by("source_hash", "order").alias("was"))
    )
    current = conform(now, SOURCE_RECORDS).select(
        "topic", "seq", F.expr(hashes.spark_payload_hash("data")).alias("is")
    )
    head_map = F.create_map(*[x for t, h in sorted(heads.items()) for x in (F.lit(t), F.lit(h))])
    head = head_map[F.col("topic")] if heads else F.lit(None).cast("long")
    joined = inside.join(current, on=["topic", "seq"], how="left")
    changed = (F.col("is").isNotNull() & (F.col("is") != F.col("was"))) | (
        F.col("is").isNull() & (F.col("seq") > F.coalesce(head, F.lit(0)))
    )
    return joined.filter(changed).select("topic", "seq")


def merge(ranges: Iterable[tuple[str, int, int]]) -> Ranges:
    """Inclusive (topic, a, b) ranges merged per topic (overlapping or adjacent)."""
    per_topic: dict[str, list[tuple[int, int]]] = {}
    for topic, a, b in ranges:
        per_topic.setdefault(topic, []).append((a, b))
    return {topic: merge_spans(held) for topic, held in sorted(per_topic.items())}


def held(progress_rows: Iterable, ranges: Ranges) -> list[tuple[str, str, int, int]]:
    """(consumer, topic, a, b): the rewound seqs each consumer's earlier windows judged,
    ``start_seq < seq <= reconciled_through`` of its progress row."""
    out = []
    for consumer, topic, start, through, _node in progress_rows:
        for a, b in ranges.get(topic, []):
            lo, hi = max(a, start + 1), min(b, through)
            if lo <= hi:
                out.append((consumer, topic, lo, hi))
    return out


def seqs_in(ranges: Ranges) -> dict[str, int]:
    return {t: sum(b - a + 1 for a, b in rs) for t, rs in ranges.items()}
