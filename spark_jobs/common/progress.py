"""The one line a job's ``main`` prints on stdout when it finishes: ``auditsync-result`` and a
JSON object (step, seconds, key counts). The pipeline runner reads it for its progress line;
under Airflow it is just a log line."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping

PREFIX = "auditsync-result "


class Timer:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)


def emit(step: str, seconds: float, counts: Mapping[str, object]) -> dict:
    figures = {"step": step, "seconds": seconds, **counts}
    print(PREFIX + json.dumps(figures, sort_keys=True), file=sys.stdout, flush=True)
    return figures


def parse(lines: Iterable[str]) -> dict | None:
    """The last result object in a job's stdout, or None."""
    found = None
    for line in lines:
        if line.startswith(PREFIX):
            found = json.loads(line[len(PREFIX) :])
    return found
