"""What the Reconciliation page shows, computed from the run lines (pure, no I/O).

From :func:`runs.pivot`'s lines (one per run, consumer and topic, newest run first) this module
derives the filtered and paged table (:func:`select`, by the one rule of filters and pages,
``spark_jobs.common.selection``), each (consumer, topic)'s newest state with a verdict colour
(:func:`topic_states`), one point per run for the chart (:func:`run_points`), and each
consumer's lag from its progress rows (:func:`lags`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spark_jobs.common import selection
from spark_jobs.common.statuses import SOURCE_REWOUND, VERDICTS

from .runs import TopicLine

CHART_RUNS = 12  # the chart shows the newest runs, oldest on the left

# A topic's verdicts, worst first: name -> (label, colour class). A rewound source comes first:
# whatever else the line says was judged against a source that went back. The statuses' own
# colours (``statuses.VERDICTS``) use the same classes.
TOPIC_VERDICTS: dict[str, tuple[str, str]] = {
    "rewound": (VERDICTS[SOURCE_REWOUND].label, VERDICTS[SOURCE_REWOUND].colour),
    "failed": ("run failed", "failed"),
    "defects": ("defects left", "defects"),
    "repaired": ("repaired", "repaired"),
    "ok": ("clean", "ok"),
    "running": ("running", "running"),
}
REWOUND, FAILED, DEFECTS_LEFT, REPAIRED, CLEAN, RUNNING = TOPIC_VERDICTS


@dataclasses.dataclass(frozen=True)
class Filters(selection.Filters):
    """The page's filters (topic, consumer) and the runs table's page; they keep a line, a
    topic state or a lag of the chosen topic and consumer (``selection``: the one rule)."""

    topic: str = ""
    consumer: str = ""
    page: int = 1

    @classmethod
    def parse(cls, topic: str | None, consumer: str | None, page: str | None) -> Filters:
        """Query parameters as typed; a page that is not a positive number is page 1."""
        chosen = cls.from_query(topic=topic, consumer=consumer)
        return dataclasses.replace(chosen, page=selection.page_number(page))


@dataclasses.dataclass(frozen=True)
class TopicState:
    consumer: str
    topic: str
    verdict: str
    line: TopicLine  # its newest line


@dataclasses.dataclass(frozen=True)
class RunPoint:
    run_id: str
    run_status: str
    delivered: int
    defects_found: int
    defects_left: int


@dataclasses.dataclass(frozen=True)
class Lag:
    consumer: str
    topic: str
    head: int | None
    sink_cursor: int | None
    reconciled_through: int

    @property
    def sink_behind(self) -> int | None:
        if self.head is None or self.sink_cursor is None:
            return None
        return max(0, self.head - self.sink_cursor)

    @property
    def unreconciled(self) -> int | None:
        return None if self.head is None else max(0, self.head - self.reconciled_through)


def select(
    lines: Sequence[TopicLine], filters: Filters, size: int = selection.RUNS_PAGE
) -> selection.Page[TopicLine]:
    """The lines ``filters`` keeps, cut to its page (a page past the end shows the last)."""
    return selection.paginate(selection.select(lines, filters), filters.page, size)


def verdict(line: TopicLine) -> str:
    if line.run_status == "running":
        return RUNNING
    if line.rewound > 0:
        return REWOUND
    if line.defects_left > 0:
        return DEFECTS_LEFT
    if line.run_status == "failed":
        return FAILED
    return REPAIRED if line.backfilled > 0 else CLEAN


def topic_states(lines: Iterable[TopicLine]) -> list[TopicState]:
    """Each (consumer, topic)'s newest line (lines come newest run first), sorted by name; a
    run's line with no topic (it failed before reconcile) is no topic's state."""
    newest: dict[tuple[str, str], TopicLine] = {}
    for line in lines:
        if line.topic:
            newest.setdefault((line.consumer, line.topic), line)
    return [TopicState(c, t, verdict(line), line) for (c, t), line in sorted(newest.items())]


def defects_found(line: TopicLine) -> int:
    """Defects reconcile found: those backfilled plus those still left."""
    return line.backfilled + line.defects_left


def run_points(lines: Iterable[TopicLine], limit: int = CHART_RUNS) -> list[RunPoint]:
    """One point per run (summed over its lines), the newest ``limit`` runs, oldest first."""
    totals: dict[str, list[Any]] = {}
    for line in lines:
        point = totals.setdefault(line.run_id, [line.run_status, 0, 0, 0])
        point[1] += line.delivered
        point[2] += defects_found(line)
        point[3] += line.defects_left
    newest = list(totals.items())[:limit]
    return [RunPoint(run_id, *figures) for run_id, figures in reversed(newest)]


def lags(
    progress: Iterable[Mapping[str, Any]], sink_cursors: Mapping[tuple[str, str], int]
) -> list[Lag]:
    """Each (consumer, topic) the pipeline reconciled: the topic's head, the sink's cursor
    (``sink_cursors``, from the landing zone; absent when unknown) and how far it is
    reconciled. ``progress`` rows: consumer, topic, head_seq, reconciled_through."""
    return [
        Lag(
            row["consumer"],
            row["topic"],
            None if row.get("head_seq") is None else int(row["head_seq"]),
            sink_cursors.get((row["consumer"], row["topic"])),
            int(row["reconciled_through"]),
        )
        for row in progress
    ]


def choices(lines: Iterable[TopicLine]) -> tuple[list[str], list[str]]:
    """The topics and consumers the filters offer."""
    found = selection.choices(lines, ("topic", "consumer"))
    return found["topic"], found["consumer"]
