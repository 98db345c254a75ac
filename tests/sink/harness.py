"""Test harness: read a consumer's landing folder back, run a sink in-process, or run it as
its own OS process (``python -m watch_service.sink``) to kill it by PID."""

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
import pyarrow.parquet as pq

from watch_service.sink.config import SinkConfig
from watch_service.sink.consumer import Sink
from watch_service.sink.landing import Landing
from watch_service.store.search_index import SearchIndex

from ..support import ROOT, wait_for


def segments(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.parquet")) if folder.exists() else []


def rows(folder: Path) -> list[dict]:
    """Every landed row, in frame order."""
    out: list[dict] = []
    for path in segments(folder):
        out.extend(pq.read_table(path).to_pylist())
    return sorted(out, key=lambda r: r["frame_no"])


def state(folder: Path) -> dict:
    path = folder / "state.json"
    return orjson.loads(path.read_bytes()) if path.exists() else {}


def faults(folder: Path) -> set[tuple[str, str, int]]:
    path = folder / "faults.jsonl"
    if not path.exists():
        return set()
    return {
        (e["kind"], e["topic"], e["seq"]) for e in map(orjson.loads, path.read_bytes().splitlines())
    }


def config(landing: Path, url: str, **changes) -> SinkConfig:
    base = SinkConfig(
        url=url,
        topics=("a", "b"),
        consumer="c1",
        landing=landing,
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
    landing = Landing(cfg.landing, cfg.consumer)
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

    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log = args, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "watch_service.sink", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
