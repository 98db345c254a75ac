"""The watch service as Airflow sees it: an HTTP connection (``auditsync_watch`` by default).

What the hook sends is built by pure methods (:meth:`WatchServiceHook.topics_request` and
friends return a :class:`Request` value) and what it receives is parsed by pure functions, so
both are tested without a socket; :meth:`WatchServiceHook.send` is the only I/O.

Connection fields: ``schema`` = http/https (default http), ``host``, ``port``, ``password`` =
the bearer key (empty in dev mode, where the service is open).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook

from watch_service.protocol.errors import AuditsyncError

DEFAULT_CONN_ID = "auditsync_watch"


class WatchServiceError(AuditsyncError):
    """The service answered with an error or not at all; the message says which."""


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: Mapping[str, str]
    timeout_s: float = 10.0


def base_url(schema: str | None, host: str | None, port: int | None) -> str:
    if not host:
        raise WatchServiceError("watch service connection: host is empty")
    if "://" in host:  # a full URL typed into the host field
        return host.rstrip("/")
    scheme = (schema or "http").lower()
    if scheme not in ("http", "https"):
        raise WatchServiceError(
            f"watch service connection: schema must be http or https, got {schema!r}"
        )
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


def parse_heads(body: bytes | str) -> dict[str, int]:
    """``{topic: head_seq}`` from a ``GET /v0/topics`` answer."""
    try:
        doc = json.loads(body)
        return {t["topic"]: int(t["head_seq"]) for t in doc["topics"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise WatchServiceError(
            f"GET /v0/topics: unexpected answer ({exc!r}): {str(body)[:200]}"
        ) from None


def error_message(status: int, body: bytes) -> str:
    """``<status> <code>: <message>`` from the service's error envelope, or the raw text."""
    try:
        err = json.loads(body)["error"]
        return f"{status} {err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{status}: {body[:200].decode(errors='replace')}"


class WatchServiceHook(BaseHook):
    conn_name_attr = "watch_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "auditsync_watch"  # the provider's connection type (an `http` one works too)
    hook_name = "auditsync watch service"

    def __init__(
        self, watch_conn_id: str = DEFAULT_CONN_ID, timeout_s: float = 10.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.watch_conn_id = watch_conn_id
        self.timeout_s = timeout_s
        self._base: tuple[str, str | None] | None = None

    # -- pure: what to send ------------------------------------------------------------------
    @staticmethod
    def build(
        base: str, key: str | None, method: str, path: str, timeout_s: float = 10.0
    ) -> Request:
        headers = {"Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return Request(method, f"{base.rstrip('/')}{path}", headers, timeout_s)

    def topics_request(self, base: str, key: str | None) -> Request:
        return self.build(base, key, "GET", "/v0/topics", self.timeout_s)

    # -- I/O ---------------------------------------------------------------------------------
    def endpoint(self) -> tuple[str, str | None]:
        """(base URL, bearer key) from the connection, looked up once."""
        if self._base is None:
            conn = self.get_connection(self.watch_conn_id)
            self._base = (base_url(conn.schema, conn.host, conn.port), conn.password or None)
        return self._base

    @staticmethod
    def send(request: Request) -> tuple[int, bytes]:
        req = urllib.request.Request(
            request.url, method=request.method, headers=dict(request.headers)
        )
        try:
            with urllib.request.urlopen(req, timeout=request.timeout_s) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            raise WatchServiceError(f"{request.method} {request.url}: {exc}") from None

    def get_heads(self) -> dict[str, int]:
        """Every topic's current ``head_seq``, as the service reports it now."""
        base, key = self.endpoint()
        status, body = self.send(self.topics_request(base, key))
        if status != 200:
            raise WatchServiceError(f"GET /v0/topics: {error_message(status, body)}")
        return parse_heads(body)
