"""The service's access log (``--access-log``): one line per request with its fields kept
apart, so a JSON line (``watch_service.logs``) can be queried by status or route without
parsing a message.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger


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
