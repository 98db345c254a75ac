"""How the service logs: plain lines or one JSON object per line (``--log-format json``), and
the optional access log (``--access-log``), one line per request with its fields kept apart so
a JSON line can be queried by status or route without parsing a message.
"""

from __future__ import annotations

import logging
import time

import orjson
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

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
    if worker is not None:
        handler.addFilter(_Worker(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class AccessLogger(AbstractAccessLogger):
    """One ``auditsync.access`` line per finished request (a stream: when it ends)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        fields = {
            "remote": request.remote,
            "method": request.method,
            "path": request.rel_url.raw_path,  # no query: ?token= carries secrets
            "status": response.status,
            "duration_ms": round(time * 1000, 3),
            "bytes": response.body_length,
        }
        self.logger.info(
            "%s %s %s %d %.1fms",
            fields["remote"],
            fields["method"],
            fields["path"],
            fields["status"],
            fields["duration_ms"],
            extra=fields,
        )
