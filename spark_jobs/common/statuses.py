"""Reconciliation status values, shared by the Spark jobs, the pipeline runner and the Airflow
plugin. Pure constants: importing this module must not import pyspark.

Every (consumer, topic, seq) in a consumer's scope gets exactly one of ``SEQ_STATUSES``.
``DUPLICATE`` is not a per-seq status: a seq delivered several times is ``DELIVERED``, and
the summary carries one extra ``DUPLICATE`` row per consumer and topic counting the extra
copies (copies - 1 summed over delivered seqs).
"""

from __future__ import annotations

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What every reader says of one summary status: the page, the report, the alerts, the
    Great Expectations suites and findings all take it from ``VERDICTS``."""

    label: str  # in words, for people
    defect: bool  # fails the quality gate when any remain after backfill
    repairable: bool  # backfill repairs it: the audit log gets the source copy
    colour: str  # the page's colour class (``v-<colour>`` in the plugin's report.css)


VERDICTS: dict[str, Verdict] = {
    DELIVERED: Verdict("delivered", False, False, "ok"),
    FILTERED: Verdict("filtered", False, False, "ok"),
    TOMBSTONED: Verdict("tombstoned", False, False, "ok"),
    SILENT_GAP: Verdict("silent gap", True, True, "defects"),
    MISMATCH: Verdict("mismatch", True, True, "defects"),
    TRIMMED_AFTER_DELIVERY: Verdict("trimmed after delivery", False, False, "ok"),
    # A delivered item with no source row and no gap covering it: nothing written repairs it.
    PHANTOM: Verdict("phantom", True, False, "defects"),
    UNVERIFIABLE: Verdict("unverifiable", False, False, "ok"),
    DIVERGENT: Verdict("divergent", True, True, "defects"),
    DUPLICATE: Verdict("duplicate", False, False, "ok"),
    SOURCE_REWOUND: Verdict("source rewound", False, False, "rewound"),
}
# Statuses that fail the quality gate when any remain after backfill, in SEQ_STATUSES order.
DEFECTS = tuple(s for s, v in VERDICTS.items() if v.defect)
# Defects a backfill can repair.
REPAIRABLE = tuple(s for s, v in VERDICTS.items() if v.repairable)

# Where an audit-log row came from, best first when two rows share topic+seq.
ORIGIN_DELIVERED = "delivered"  # a delivered copy whose hash matches the source
ORIGIN_BACKFILL = "backfill"  # the source copy, re-read from PostgreSQL
ORIGIN_UNVERIFIED = "delivered_unverified"  # delivered, source already trimmed: no hash check
