"""Test harness: read a consumer's landing back (a folder or an S3 prefix, through
``Storage``), run a sink in-process, or run it as its own OS process (``python -m
watch_service.sink``) to kill it by PID."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson

from watch_service.protocol.landing_keys import segments_since
from watch_service.sink.config import SinkConfig
from watch_service.sink.consumer import Sink
from watch_service.sink.landing import Landing
from watch_service.storage import Storage
from watch_service.store.search_index import SearchIndex

from ..support import ROOT, wait_for


def _store(where: Storage | SinkConfig) -> Storage:
    return consumer(where) if isinstance(where, SinkConfig) else where


def segments(where: Storage | SinkConfig) -> list[str]:
    """Names of a consumer's segments (its landing, or a sink configuration's), in frame
    order."""
    store = _store(where)
    return [key.name for key in segments_since(store.listing)]


def rows(where: Storage | SinkConfig) -> list[dict]:
    """Every landed row, in frame order."""
    store = _store(where)
    out: list[dict] = []
    for name in segments(store):
        out.extend(store.read_parquet(name).to_pylist())
    return sorted(out, key=lambda r: r["frame_no"])


def state(where: Storage | SinkConfig) -> dict:
    raw = _store(where).read_bytes("state.json")
    return orjson.loads(raw) if raw is not None else {}


def faults(where: Storage | SinkConfig) -> set[tuple[str, str, int]]:
    """Every fault decision on record, from the consumer's ``faults/`` objects."""
    store, out = _store(where), set()
    for name, _ in store.files("faults"):
        for line in (store.read_bytes(f"faults/{name}") or b"").splitlines():
            e = orjson.loads(line)
            out.add((e["kind"], e["topic"], e["seq"]))
    return out


def consumer(cfg: SinkConfig) -> Storage:
    """The consumer's landing (folder or prefix) of a sink configuration."""
    return cfg.storage().child(cfg.consumer)


def landing_flags(root: Storage) -> list[str]:
    return ["--landing", root.uri()]


def landing_env(root: Storage) -> dict[str, str]:
    """What a sink process needs to reach ``root``: the AWS variables of an S3 landing."""
    return {} if root.location.is_local else root.s3.environ()


def config(root: Storage | Path, url: str, lock_url: str | None = None, **changes) -> SinkConfig:
    """A sink on ``root`` (a Storage, or a local folder); ``lock_url``: an S3 landing's lock."""
    root = root if isinstance(root, Storage) else Storage.at(root)
    base = SinkConfig(
        url=url,
        topics=("a", "b"),
        consumer="c1",
        landing=root.location,
        s3=None if root.location.is_local else root.s3,
        lock_url=lock_url,
        heartbeat_ms=1000,
        watchdog_slack_ms=200,
        flush_ms=50,
        progress_s=60,
        backoff_cap_ms=200,
    )
    return dataclasses.replace(base, **changes)


@dataclasses.dataclass
class Running:
    sink: Sink
    task: asyncio.Task

    async def stop(self, timeout: float = 10.0) -> int:
        self.sink.stop()
        return await asyncio.wait_for(self.task, timeout)


@contextlib.asynccontextmanager
async def running(cfg: SinkConfig, index: SearchIndex | None = None) -> AsyncIterator[Running]:
    """A sink on ``cfg`` in this event loop, with a deterministic backoff (lowest jitter)."""
    landing = Landing(cfg.storage(), cfg.consumer, cfg.lock_url)
    landing.open()
    sink = Sink(cfg, landing, index, draw=lambda: 0.0)
    run = Running(sink, asyncio.create_task(sink.run()))
    try:
        yield run
    finally:
        if not run.task.done():
            await run.stop()
        landing.close()


class SinkProcess:
    """The sink as a child process, its output appended to ``log``."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args, self.log, self.env = args, log, env or {}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "watch_service.sink", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
            )

    def alive(self) -> bool:
        """True while running; fails the test with the log's tail if the sink has exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"sink exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
            )
        return True

    async def end(self, sig: int) -> int:
        """Send ``sig`` to the sink's PID and return its exit status."""
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        await wait_for(lambda: self.proc.poll() is not None, timeout=30, what="the sink to exit")
        return self.proc.returncode
