"""Late copies: record copies delivered in this run for seqs an earlier run already judged
(``start_seq < seq <= lo``), e.g. a sink re-sending from a rewound cursor after a restart.

A full audit over all history would judge such a seq with every copy it ever got, so the
incremental verdict is revised the same way, from the seq's current verdict (the newest
``ledger`` row covering it; no row means ``delivered`` when the source or a gap holds the seq
or it was rewound, and "never judged" otherwise), the source (re-read for these seqs only)
and the new copies:

=========================  ===========================================================
earlier verdict            with the late copies
=========================  ===========================================================
``delivered``              stays when every new copy matches (each one more
                           ``duplicate``); ``divergent`` when one differs
``divergent``              stays
``mismatch``               ``divergent`` when a new copy matches, else stays
other, source row          ``delivered`` when every copy matches, ``divergent`` when
                           some do, else ``mismatch``
no source, inside a gap    ``trimmed_after_delivery``
neither                    ``phantom``
=========================  ===========================================================

Seqs the source rewound (``rewound`` ranges, see ``rewind.py``) were judged against content
the source no longer has: an earlier ``delivered`` there counts as copies that differ.
Consumers that hold rewound seqs and got no copy of them in this run come here too (a held
delivered copy is now a ``mismatch``, or a ``phantom`` above the head; ``held_copies``).
Copies above the source's head at judgement time come here too, with no source row read for
them: they are ``phantom`` (and stay so while the head is below them).

A changed verdict is a detail row of this run (status ``count`` + 1) and revises the earlier
one (``revised`` + 1 on the old status); the ledger gets the seq's new verdict and copy count
whenever it was not plain ``delivered``. Late tombstones do not revise verdicts (a seq the
cursor passed was judged with what the consumer had then).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.common import statuses as st
from spark_jobs.common import step_cache
from spark_jobs.steps.reconcile.scope import SCOPE
from spark_jobs.steps.reconcile.transforms import copy_hashes, hex_text
from spark_jobs.warehouse.schemas import (
    DETAIL,
    GAPS,
    LEDGER,
    SOURCE_RECORDS,
    SUMMARY,
    conform,
)
from watch_service.protocol import hashes


def late_copies(deliveries: DataFrame, scope: DataFrame) -> DataFrame:
    """(consumer, topic, seq, hash) of copies outside their scope's window: at or below its
    ``lo`` (judged before), or above its ``watermark`` (the source's head caps it)."""
    s = F.broadcast(
        conform(scope, SCOPE).select("consumer", "topic", "start_seq", "lo", "watermark")
    )
    joined = copy_hashes(deliveries).join(s, on=["consumer", "topic"], how="inner")
    late = (F.col("seq") > F.col("start_seq")) & (F.col("seq") <= F.col("lo"))
    return joined.filter(late | (F.col("seq") > F.col("watermark"))).select(
        "consumer", "topic", "seq", "hash"
    )


def held_copies(held: DataFrame, late: DataFrame) -> DataFrame:
    """Rows for the rewound seqs earlier runs judged, (consumer, topic, range_from, range_to),
    that got no copy in this run: the late path judges them with the copies they hold (a
    delivered one no longer matches). ``is_copy`` tells them from real copies."""
    seqs = held.select(
        "consumer", "topic", F.explode(F.sequence("range_from", "range_to")).alias("seq")
    ).join(
        late.select("consumer", "topic", "seq"), on=["consumer", "topic", "seq"], how="left_anti"
    )
    return late.withColumn("is_copy", F.lit(True)).unionByName(
        seqs.withColumn("hash", F.lit(None).cast("binary")).withColumn("is_copy", F.lit(False))
    )


def rejudge(
    late: DataFrame,
    ledger: DataFrame,
    records: DataFrame,
    gaps: DataFrame,
    judged_batch: int,
    rewound: DataFrame | None = None,
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(detail rows of changed verdicts, ledger rows, summary deltas without run_id).
    ``rewound``: (topic, range_from, range_to) the source wrote again."""
    src = conform(records, SOURCE_RECORDS).select(
        "topic", "seq", F.unhex(F.expr(hashes.spark_payload_hash("data"))).alias("source_hash")
    )
    per = late.join(src, on=["topic", "seq"], how="left")
    if "is_copy" not in per.columns:
        per = per.withColumn("is_copy", F.lit(True))
    matches = F.col("is_copy") & (F.col("hash").isNull() | (F.col("hash") == F.col("source_hash")))
    per = per.groupBy("consumer", "topic", "seq").agg(
        F.max("source_hash").alias("source_hash"),
        F.count_if("is_copy").alias("m"),
        F.count_if(matches & F.col("source_hash").isNotNull()).alias("matching"),
        F.coalesce(F.max(F.when(F.col("is_copy") & ~matches, F.col("hash"))), F.max("hash")).alias(
            "some_hash"
        ),
    )
    g = F.broadcast(
        conform(gaps, GAPS).select(F.col("topic").alias("g_topic"), "gap_from", "gap_to")
    )
    per = (
        per.join(
            g,
            on=(F.col("topic") == F.col("g_topic"))
            & F.col("seq").between(F.col("gap_from"), F.col("gap_to")),
            how="left",
        )
        .withColumn("in_gap", F.col("gap_from").isNotNull())
        .drop("g_topic", "gap_from", "gap_to")
    )
    per = _mark_rewound(per, rewound)
    led = conform(ledger, LEDGER).select(
        F.col("consumer").alias("l_consumer"),
        F.col("topic").alias("l_topic"),
        F.col("seq").alias("l_from"),
        F.col("seq_to").alias("l_to"),
        "status",
        "copies",
        "judged_batch",
    )
    on = (
        (F.col("consumer") == F.col("l_consumer"))
        & (F.col("topic") == F.col("l_topic"))
        & F.col("seq").between(F.col("l_from"), F.col("l_to"))
    )
    old = (
        per.join(led, on=on, how="left")
        .groupBy(
            "consumer",
            "topic",
            "seq",
            "source_hash",
            "m",
            "matching",
            "some_hash",
            "in_gap",
            "rewound",
        )
        .agg(F.max_by(F.struct("status", "copies"), "judged_batch").alias("old"))
    )
    known = F.col("source_hash").isNotNull() | F.col("in_gap") | F.col("rewound")
    old_status = F.coalesce(F.col("old.status"), F.when(known, F.lit(st.DELIVERED)))
    in_source = F.col("source_hash").isNotNull()
    # What the earlier copies were against the source now.
    was = F.when(
        F.col("rewound") & (F.col("old_status") == st.DELIVERED), F.lit(st.MISMATCH)
    ).otherwise(F.col("old_status"))
    all_match, some_match = F.col("matching") == F.col("m"), F.col("matching") > 0
    new_status = (
        # A held seq without a new copy: only a rewind changes what its copies are.
        F.when((F.col("m") == 0) & (was != st.MISMATCH), F.col("old_status"))
        .when((was == st.DELIVERED) & (~in_source | all_match), st.DELIVERED)
        .when(was == st.DELIVERED, st.DIVERGENT)
        .when(was == st.DIVERGENT, st.DIVERGENT)
        .when(in_source & (was == st.MISMATCH) & some_match, st.DIVERGENT)
        .when(in_source & (was == st.MISMATCH), st.MISMATCH)
        .when(in_source & all_match, st.DELIVERED)
        .when(in_source & some_match, st.DIVERGENT)
        .when(in_source, st.MISMATCH)
        .when(F.col("in_gap"), st.TRIMMED_AFTER_DELIVERY)
        .otherwise(st.PHANTOM)
    )
    v = step_cache.cache(
        old.withColumn("old_status", old_status)
        .withColumn("old_copies", F.coalesce(F.col("old.copies"), F.lit(0)))
        .withColumn("status", new_status)
        .withColumn("copies", F.col("old_copies") + F.col("m"))
    )
    changed = F.col("old_status").isNull() | (F.col("old_status") != F.col("status"))
    not_plain = F.col("old_status").isNull() | (F.col("old_status") != st.DELIVERED)
    differs = ~(in_source & (F.col("status") == st.DELIVERED))
    detail = conform(
        v.filter(changed).select(
            "consumer",
            "topic",
            "seq",
            F.col("seq").alias("seq_to"),
            "status",
            hex_text("source_hash").alias("source_hash"),
            F.when(differs, hex_text("some_hash")).alias("delivered_hash"),
            "copies",
        ),
        DETAIL,
    )
    ledger_rows = conform(
        v.filter(not_plain).select(
            "consumer",
            "topic",
            "seq",
            F.col("seq").alias("seq_to"),
            "status",
            "copies",
            F.lit(judged_batch).alias("judged_batch"),
        ),
        LEDGER,
    )
    plain = (F.col("old_status") == st.DELIVERED) & ~F.col("rewound")
    dup = F.when(plain, F.col("m")).otherwise(F.col("copies") - 1)
    deltas = (
        v.filter(changed)
        .select("consumer", "topic", "status", F.lit(1).alias("count"), F.lit(0).alias("revised"))
        .unionByName(
            v.filter(changed & F.col("old_status").isNotNull()).select(
                "consumer",
                "topic",
                F.col("old_status").alias("status"),
                F.lit(0).alias("count"),
                F.lit(1).alias("revised"),
            )
        )
        .unionByName(
            v.filter(F.col("status") == st.DELIVERED)
            .select(
                "consumer",
                "topic",
                F.lit(st.DUPLICATE).alias("status"),
                dup.alias("count"),
                F.lit(0).alias("revised"),
            )
            .filter(F.col("count") > 0)
        )
    )
    return detail, ledger_rows, deltas


def _mark_rewound(per: DataFrame, rewound: DataFrame | None) -> DataFrame:
    if rewound is None:
        return per.withColumn("rewound", F.lit(False))
    r = F.broadcast(rewound.select(F.col("topic").alias("r_topic"), "range_from", "range_to"))
    cond = (F.col("topic") == F.col("r_topic")) & F.col("seq").between(
        F.col("range_from"), F.col("range_to")
    )
    return (
        per.join(r, on=cond, how="left")
        .withColumn("rewound", F.col("r_topic").isNotNull())
        .drop("r_topic", "range_from", "range_to")
    )


def merge_summary(summary: DataFrame, deltas: DataFrame, run_id: str) -> DataFrame:
    """The run's summary with the late deltas added, one row per (consumer, topic, status)."""
    rows = (
        conform(summary, SUMMARY)
        .drop("run_id")
        .unionByName(
            deltas.select(
                "consumer",
                "topic",
                "status",
                F.col("count").cast("long"),
                F.col("revised").cast("long"),
            )
        )
    )
    total = rows.groupBy("consumer", "topic", "status").agg(
        F.sum("count").alias("count"), F.sum("revised").alias("revised")
    )
    return conform(total.withColumn("run_id", F.lit(run_id)), SUMMARY)
