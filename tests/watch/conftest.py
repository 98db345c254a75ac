"""Fixtures of the watch layer: a small client for the service's HTTP API, a direct database
connection for watching session rows, and a keys file for the authenticated variants."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from tests.support import unique

from . import wire

SECRETS = {
    "admin": "secret-admin-0001",
    "reader": "secret-reader-0002",
    "other": "secret-other-0003",
}
READER_PREFIX = "w."


class Api:
    """The service's HTTP API as the tests use it; every call asserts success."""

    def __init__(self, http: aiohttp.ClientSession, url: str, headers: dict | None = None) -> None:
        self.http, self.url, self.headers = http, url, headers or {}

    async def _call(self, method: str, path: str, expect: int | tuple = 200, **kw) -> dict:
        async with self.http.request(method, self.url + path, headers=self.headers, **kw) as r:
            body = await r.json()
            want = expect if isinstance(expect, tuple) else (expect,)
            assert r.status in want, (method, path, r.status, body)
            return body

    async def topic(self, name: str | None = None, **cfg) -> str:
        name = name or unique("w.t")
        await self._call("PUT", f"/v0/topics/{name}", (200, 201), json=cfg)
        return name

    async def append(self, topic: str, *records) -> dict:
        """Append records: plain values become ``{"data": value}``."""
        recs = [r if isinstance(r, dict) and "data" in r else {"data": r} for r in records]
        return await self._call("POST", f"/v0/topics/{topic}/records", json={"records": recs})

    async def records(self, topic: str, from_seq: int = 0) -> list[dict]:
        body = await self._call(
            "GET", f"/v0/topics/{topic}/records?from_seq={from_seq}&limit=10000"
        )
        return body["records"]

    async def delete(self, topic: str) -> dict:
        return await self._call("DELETE", f"/v0/topics/{topic}")

    async def watch(self, body: dict) -> dict:
        return await wire.create(self.http, self.url, body, self.headers)

    async def stream(self, wid: str, **kw) -> wire.Stream:
        return await wire.open_stream(self.http, self.url, wid, **kw)


@pytest.fixture
def api(service, http) -> Api:
    return Api(http, service.url)


async def session_row(db, wid: str) -> dict | None:
    cur = await db.execute(
        "SELECT cursors, definition, stream_lease_until IS NOT NULL FROM watch_sessions "
        "WHERE wid = %s",
        (wid,),
    )
    row = await cur.fetchone()
    return None if row is None else {"cursors": row[0], "definition": row[1], "leased": row[2]}


def stream_closed_with(db, wid: str, cursors: dict[str, int] | Callable[[dict], bool]):
    """A condition for ``wait_for``: the stream of ``wid`` has ended and stored ``cursors``
    (or cursors that ``cursors(stored)`` accepts)."""
    accept = cursors if callable(cursors) else cursors.__eq__

    async def check() -> bool:
        row = await session_row(db, wid)
        return row is not None and not row["leased"] and accept(row["cursors"])

    return check


def write_keys_file(path: Path) -> Path:
    def entry(key_id: str, scopes: list[str], prefixes: list[str]) -> str:
        digest = hashlib.sha256(SECRETS[key_id].encode()).hexdigest()
        return (
            f'[[keys]]\nid = "{key_id}"\nsecret_sha256 = "{digest}"\n'
            f"scopes = {scopes!r}\nprefixes = {prefixes!r}\n".replace("'", '"')
        )

    path.write_text(
        entry("admin", ["read", "write", "admin"], [""])
        + entry("reader", ["read"], [READER_PREFIX])
        + entry("other", ["read"], [""])
    )
    return path


@pytest.fixture(scope="session")
def keys_file(tmp_path_factory) -> Path:
    return write_keys_file(tmp_path_factory.mktemp("keys") / "keys.toml")


def bearer(key_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[key_id]}"}
