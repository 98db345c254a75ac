"""How every command logs: plain lines or one JSON object per line, as the one setting
``AUDITSYNC_LOG_FORMAT`` (``text`` | ``json``; ``serve``'s ``--log-format``) asks. ``serve`` and
the other ``auditsync`` commands, the sink and the Spark jobs install :func:`configure` in their
entry point; what a command prints for its user (a job's result line, the pipeline's progress)
goes through :func:`line`, so in JSON mode every line it writes parses as JSON.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Attributes of a LogRecord that describe the record itself, not the event it logs.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", …extra fields, "exc"?}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update((k, v) for k, v in vars(record).items() if k not in _RESERVED)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class OneLine(logging.Filter):
    """A message on one line (libpq's errors carry a newline and a tab), and the same warning
    from the same logger at most once per ``window_s``: a reconnect loop against an unreachable
    database says so once, then how many times it repeated, not twice a second."""

    def __init__(self, window_s: float = 30.0, clock=time.monotonic) -> None:
        super().__init__()
        self.window_s, self.clock = window_s, clock
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "\n" in message:
            message = " ".join(part.strip() for part in message.splitlines() if part.strip())
            record.msg, record.args = message, None
        if record.levelno < logging.WARNING or record.levelno >= logging.ERROR:
            return True
        key, now = (record.name, message), self.clock()
        seen = self._last.get(key)
        if seen is not None and now - seen[0] < self.window_s:
            self._last[key] = (seen[0], seen[1] + 1)
            return False
        if seen is not None and seen[1]:
            record.msg = f"{message} (and {seen[1]} more like it in {now - seen[0]:.0f} s)"
        self._last[key] = (now, 0)
        if len(self._last) > 1000:  # bounded: forget the oldest half
            for old in sorted(self._last, key=lambda k: self._last[k][0])[:500]:
                del self._last[old]
        return True


class _Worker(logging.Filter):
    """Stamps every record with its worker's index (``serve --workers N``)."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True


def configure(log_format: str, level: int = logging.INFO, worker: int | None = None) -> None:
    """Install the root handler once, in the process's entry point; a worker's lines say
    which worker wrote them."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    elif worker is None:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        text = TEXT_FORMAT.replace("%(name)s", "%(name)s[worker %(worker)s]")
        handler.setFormatter(logging.Formatter(text))
    handler.addFilter(OneLine())
    if worker is not None:
        handler.addFilter(_Worker(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def configure_command(log_format: str, level: int = logging.INFO) -> None:
    """A command's entry point (not ``serve``'s, which always installs its own): JSON lines, or
    the plain format unless the process logs somewhere already (a test running the command in
    process keeps its own handlers)."""
    if log_format == "json":
        configure(log_format, level)
    else:
        logging.basicConfig(level=level, format=TEXT_FORMAT)


def line(
    text: str, log_format: str, logger: str = "auditsync", level: str = "INFO", **fields: Any
) -> str:
    """What a command prints for its user: ``text`` as it is, or (``json``) the JSON line
    :class:`JsonFormatter` writes for the same message, ``fields`` beside it."""
    if log_format != "json":
        return text
    record = logging.LogRecord(logger, logging.getLevelName(level), "", 0, text, None, None)
    record.__dict__.update(fields)
    return JsonFormatter().format(record)
