"""``make demo`` (``python -m watch_service.tools.demo``): the whole product end to end, here.

The log half: the project's embedded PostgreSQL in ``.local/`` (or ``DATABASE_URL``), migrated;
``auditsync serve`` as a child process on a free loopback port; three topics (one capped), a
few hundred records appended in batches and read back through the Records API (contiguous seqs,
intact payloads, the cap's tombstone); a tenant with authorization writes through the Permify
API. The pipeline half (``demo_airflow.py``): a sink with a little loud fault injection, more
writes while it runs, ``airflow dags test audit_sync`` (compact, reconcile, backfill, verify,
Great Expectations), and a summary of what was written, delivered, found and repaired, with the
path of the Data Docs. It prints a line per step and stops everything it started.

``--log-only`` runs the log half alone. Exit 0 when every check passed, 1 when a check failed,
2 when the demo could not set up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from watch_service import settings as settings_mod
from watch_service.protocol.errors import AuditsyncError
from watch_service.settings import Settings, SettingsError
from watch_service.storage import Storage
from watch_service.store.cluster import EmbeddedPgError
from watch_service.store.database import database_url, embedded_cluster
from watch_service.store.migrate import MigrationError, migrate
from watch_service.tools import demo_airflow as pipeline
from watch_service.tools.local import ServiceProcess

RECORDS_PER_TOPIC = 300
BATCH = 50
CAP = 100
TOPICS = {"orders": {}, "payments": {"ttl_ms": 24 * 3600 * 1000}, "audit": {"max_records": CAP}}


class DemoFailed(AuditsyncError):
    """A check of the demo failed; the message says which and how."""


@dataclasses.dataclass
class Demo:
    settings: Settings
    run_id: str = dataclasses.field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))
    db_url: str = ""
    started_cluster: bool = False
    service: ServiceProcess | None = None
    service_url: str = ""
    topics: dict[str, str] = dataclasses.field(default_factory=dict)  # short name -> topic
    written: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    summary: list[str] = dataclasses.field(default_factory=list)
    began: float = dataclasses.field(default_factory=time.monotonic)
    # the pipeline half (watch_service/tools/demo_airflow.py)
    tenant: str = ""
    sink: subprocess.Popen | None = None
    landing: Storage | None = None  # the sink's landing zone, once the sink is started
    heads: dict[str, int] = dataclasses.field(default_factory=dict)  # short name -> head_seq
    gx_root: Path = Path()
    pipeline_run: str = ""
    airflow_ok: bool = False

    @property
    def work_dir(self) -> Path:
        return self.log_dir / self.run_id

    def check(self, ok: bool, message: str) -> None:
        _check(ok, message)

    @property
    def log_dir(self) -> Path:
        return self.settings.local_dir / "demo"

    def say(self, step: str, message: str) -> None:
        print(f"[{time.monotonic() - self.began:5.1f}s] {step:<9} {message}", flush=True)


# -- steps ---------------------------------------------------------------------------------------
def start_database(demo: Demo) -> None:
    if demo.settings.embedded:
        cluster = embedded_cluster(demo.settings)
        demo.started_cluster = cluster.status() != "running"
        demo.db_url = cluster.start()
        how = "started" if demo.started_cluster else "already running"
        where = f"embedded cluster in {cluster.base_dir} ({how})"
    else:
        demo.db_url = database_url(demo.settings)
        where = "DATABASE_URL"
    applied = migrate(demo.db_url)
    schema = f"{len(applied)} migration(s) applied" if applied else "schema up to date"
    demo.say("database", f"{where}: {demo.db_url}; {schema}")


def start_service(demo: Demo, timeout: float = 20.0) -> None:
    demo.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = demo.log_dir / "service.log"
    demo.service = ServiceProcess(demo.db_url, log_path=log_path)
    try:
        demo.service.start(timeout)
    except RuntimeError as exc:
        raise DemoFailed(str(exc)) from exc
    demo.service_url = demo.service.url
    asyncio.run(_wait_ready(demo, timeout, log_path))
    demo.say("service", f"pid {demo.service.pid} ready on {demo.service_url} (log: {log_path})")


async def create_topics(demo: Demo, http: aiohttp.ClientSession) -> None:
    for short, config in TOPICS.items():
        name = f"demo-{demo.run_id}-{short}"
        status, body = await _call(http, "PUT", f"{demo.service_url}/v0/topics/{name}", json=config)
        _check(status == 201, f"PUT {name}: expected 201, got {status} {body}")
        demo.topics[short] = name
    shown = ", ".join(
        f"{name} ({', '.join(f'{k}={v}' for k, v in TOPICS[s].items()) or 'unlimited'})"
        for s, name in demo.topics.items()
    )
    demo.say("topics", f"created {shown}")


async def write_records(demo: Demo, http: aiohttp.ClientSession) -> None:
    started = time.perf_counter()
    for short, name in demo.topics.items():
        records = [
            {
                "data": {"topic": short, "n": i, "amount": i * 7 % 101},
                "meta": {"writer": "demo"},
                "tag": "created",
                "node": f"node-{i % 3}",
            }
            for i in range(RECORDS_PER_TOPIC)
        ]
        head = 0
        for i in range(0, len(records), BATCH):
            status, body = await _call(
                http,
                "POST",
                f"{demo.service_url}/v0/topics/{name}/records",
                json={"records": records[i : i + BATCH]},
            )
            _check(status == 200, f"append to {name}: {status} {body}")
            _check(
                body["first_seq"] == head + 1,
                f"append to {name}: first_seq {body['first_seq']}, expected {head + 1}",
            )
            head = body["last_seq"]
        demo.written[short] = records
    total = RECORDS_PER_TOPIC * len(demo.topics)
    elapsed = time.perf_counter() - started
    demo.say(
        "write",
        f"appended {total} records in batches of {BATCH} ({total / elapsed:,.0f} records/s)",
    )


async def read_back(demo: Demo, http: aiohttp.ClientSession) -> None:
    """Page through each topic from 0, checking contiguity, payloads and the cap's tombstone."""
    for short, name in demo.topics.items():
        written = demo.written[short]
        cursor, seen, tombstone = 0, [], None
        while True:
            status, body = await _call(
                http,
                "GET",
                f"{demo.service_url}/v0/topics/{name}/records?from_seq={cursor}&limit=64",
            )
            _check(status == 200, f"read {name}: {status} {body}")
            if "tombstone" in body:
                _check(tombstone is None, f"{name}: a second tombstone at cursor {cursor}")
                tombstone = body["tombstone"]
                cursor = tombstone["gap_to"]
            seqs = [r["$seq"] for r in body["records"]]
            _check(
                seqs == list(range(cursor + 1, cursor + 1 + len(seqs))),
                f"{name}: not contiguous after {cursor}: {seqs[:5]}",
            )
            if not seqs:
                break
            seen += body["records"]
            cursor = seqs[-1]
        _check(cursor == len(written), f"{name}: read up to {cursor}, wrote {len(written)}")
        for rec in seen:
            sent = written[rec["$seq"] - 1]
            _check(
                (rec["data"], rec["meta"], rec["$tag"], rec["$node"])
                == (sent["data"], sent["meta"], sent["tag"], sent["node"]),
                f"{name}: seq {rec['$seq']} differs from what was written",
            )
        if short == "audit":
            expected = {"reason": "cap", "gap_from": 1, "gap_to": RECORDS_PER_TOPIC - CAP}
            _check(tombstone == expected, f"{name}: tombstone {tombstone}, expected {expected}")
        else:
            _check(tombstone is None, f"{name}: unexpected tombstone {tombstone}")
        note = (
            f", tombstone {tombstone['reason']} [{tombstone['gap_from']}, {tombstone['gap_to']}]"
            if tombstone
            else ""
        )
        demo.say(
            "read",
            f"{name}: {len(seen)} records, seqs {seen[0]['$seq']}..{cursor} "
            f"contiguous, payloads intact{note}",
        )
        demo.summary.append(f"{name:<32} head {cursor:>4}  retained {len(seen):>4}{note}")


def stop(demo: Demo) -> None:
    pipeline.stop_sink(demo)
    if demo.service is not None and demo.service.running():
        demo.service.stop(timeout=10)
        demo.say("stop", f"service pid {demo.service.pid} stopped")
    if demo.started_cluster:
        embedded_cluster(demo.settings).stop()
        demo.say("stop", "embedded PostgreSQL stopped (this run started it)")


# -- running -------------------------------------------------------------------------------------
async def api_steps(demo: Demo) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await create_topics(demo, http)
        await write_records(demo, http)
        await read_back(demo, http)
        await pipeline.create_tenant(demo, http)
        await pipeline.write_authz(demo, http, 0)


async def live_steps(demo: Demo) -> dict[str, int]:
    """With the sink running: more authorization writes, then every topic's head."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await pipeline.write_authz(demo, http, pipeline.AUTHZ_WRITES)
        return await pipeline.read_heads(demo, http)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # the log half only (fast; what tests/service/test_demo.py runs)
    log_only = "--log-only" in argv
    try:
        demo = Demo(settings_mod.load())
    except SettingsError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    code = 0
    try:
        start_database(demo)
        start_service(demo)
        asyncio.run(api_steps(demo))
        if not log_only:
            pipeline.start_sink(demo)
            pipeline.wait_for_sink(demo, asyncio.run(live_steps(demo)))
            pipeline.run_airflow(demo)
            demo.summary = pipeline.summarize(demo)
        print("\nsummary")
        for line in demo.summary:
            print(f"  {line}")
        print(f"demo passed in {time.monotonic() - demo.began:.1f} s")
    except DemoFailed as exc:
        print(f"\ndemo FAILED: {exc}", file=sys.stderr)
        code = 1
    except (EmbeddedPgError, MigrationError, OSError, aiohttp.ClientError) as exc:
        print(f"\ndemo could not run: {exc}", file=sys.stderr)
        code = 2
    finally:
        stop(demo)
    return code


# -- helpers -------------------------------------------------------------------------------------
def _check(ok: bool, message: str) -> None:
    if not ok:
        raise DemoFailed(message)


async def _call(http: aiohttp.ClientSession, method: str, url: str, **kw) -> tuple[int, dict]:
    async with http.request(method, url, **kw) as r:
        return r.status, await r.json()


async def _wait_ready(demo: Demo, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    assert demo.service is not None
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if not demo.service.running():
                raise DemoFailed(f"the service exited with {demo.service.stop()}; see {log_path}")
            try:
                async with http.get(f"{demo.service_url}/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)  # the child is still starting; nothing to wait on but time
    raise DemoFailed(f"the service was not ready within {timeout:.0f} s; see {log_path}")


if __name__ == "__main__":
    sys.exit(main())
