"""What a job prints: the one line its ``main`` prints on stdout when it finishes
(``auditsync-result`` and a JSON object: step, seconds, key counts; under Airflow just a log
line) and the lines it prints for its user (:func:`say`). With ``AUDITSYNC_LOG_FORMAT=json``
each is one JSON log line (``watch_service.logs``), the result's figures under ``result``."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any

from watch_service import logs
from watch_service.settings import SettingsError, log_format

PREFIX = "auditsync-result "
RESULT = "auditsync-result"
LOGGER = "auditsync.pipeline"


def configure(level: int = logging.WARNING) -> None:
    """A job's entry point: JSON log lines when the setting asks (text: the logging it had,
    untouched); a bad setting ends the process with the setting's name (exit 2, as a bad flag
    does)."""
    try:
        if log_format() == "json":
            logs.configure("json", level)
    except SettingsError as exc:
        print(f"auditsync: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _format() -> str:
    try:
        return log_format()
    except SettingsError:  # refused by configure at the entry point; here, print as text
        return "text"


def say(text: str, stream: IO[str] | None = None, level: str = "INFO", **fields: Any) -> None:
    """A line for the job's user, on stdout (or ``stream``): as is, or one JSON line."""
    out = logs.line(text, _format(), logger=LOGGER, level=level, **fields)
    print(out, file=stream or sys.stdout, flush=True)


class Timer:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)


def emit(step: str, seconds: float, counts: Mapping[str, object]) -> dict:
    figures = {"step": step, "seconds": seconds, **counts}
    if _format() == "json":
        say(RESULT, result=figures)
    else:
        print(PREFIX + json.dumps(figures, sort_keys=True), file=sys.stdout, flush=True)
    return figures


def parse(lines: Iterable[str]) -> dict | None:
    """The last result object in a job's stdout (either format), or None."""
    found = None
    for line in lines:
        if line.startswith(PREFIX):
            found = json.loads(line[len(PREFIX) :])
        elif line.startswith("{") and f'"message":"{RESULT}"' in line:
            found = json.loads(line).get("result")
    return found
