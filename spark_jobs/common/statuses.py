"""Reconciliation status values, shared by the Spark jobs, the pipeline runner and the Airflow
plugin. Pure constants: importing this module must not import pyspark.

Every (consumer, topic, seq) in a consumer's scope gets exactly one of ``SEQ_STATUSES``.
``DUPLICATE`` is not a per-seq status: a seq delivered several times is ``DELIVERED``, and
the summary carries one extra ``DUPLICATE`` row per consumer and topic counting the extra
copies (copies - 1 summed over delivered seqs).
"""

from __future__ import annotations

DELIVERED = "delivered"
DUPLICATE = "duplicate"
FILTERED = "filtered"
TOMBSTONED = "tombstoned"
SILENT_GAP = "silent_gap"
MISMATCH = "mismatch"
TRIMMED_AFTER_DELIVERY = "trimmed_after_delivery"
PHANTOM = "phantom"
# A source record delivered with matching content AND with some copy of other content. Seqs
# never change (invariant L2), so a different copy is a finding, never a plain duplicate.
DIVERGENT = "divergent"
# The source row is gone (retention), the consumer filters a node, and it got neither the
# record nor a tombstone: it may have been its own node's record (filtered, cursor moved on
# silently, trimmed later) or lost; the node of a trimmed record is no longer known.
UNVERIFIABLE = "unverifiable"

SEQ_STATUSES = (
    DELIVERED,
    FILTERED,
    TOMBSTONED,
    SILENT_GAP,
    MISMATCH,
    TRIMMED_AFTER_DELIVERY,
    PHANTOM,
    UNVERIFIABLE,
    DIVERGENT,
)
# Not a seq's verdict but an event of a run: the source lost seqs it had given out (failover
# to a lagging replica, a restore) and wrote them again. Its summary rows count the rewound
# seqs per (consumer, topic); the ranges are in the run's figures.
SOURCE_REWOUND = "source_rewound"
SUMMARY_STATUSES = SEQ_STATUSES + (DUPLICATE, SOURCE_REWOUND)
# Summary statuses that are not net verdicts (a full audit does not reproduce them).
EVENT_STATUSES = (DUPLICATE, SOURCE_REWOUND)

# Statuses that fail the quality gate when any remain after backfill.
DEFECTS = (SILENT_GAP, MISMATCH, PHANTOM, DIVERGENT)
# Defects a backfill can repair: the audit log gets the source copy. A phantom (a delivered
# item with no source row and no gap covering it) cannot be repaired by writing anything.
REPAIRABLE = (SILENT_GAP, MISMATCH, DIVERGENT)

# Where an audit-log row came from, best first when two rows share topic+seq.
ORIGIN_DELIVERED = "delivered"  # a delivered copy whose hash matches the source
ORIGIN_BACKFILL = "backfill"  # the source copy, re-read from PostgreSQL
ORIGIN_UNVERIFIED = "delivered_unverified"  # delivered, source already trimmed: no hash check
