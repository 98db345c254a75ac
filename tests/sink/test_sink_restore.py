"""The sink kept running, never restarted, through a restore of the database its search index
lives in (issue 32). The index must end up holding what indexing the source now would give.

- The whole database put back to an earlier copy of its data folder (the source and the index
  together): the kept seqs and the seqs written again after it, every one.
- The index alone taken back to a backup while the source kept everything: the sink's state
  still says those documents were indexed; the index's own mark (``search_index_marks``) says
  otherwise, and the sink re-indexes from it. Without the mark the documents the restore took
  away were never written again.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path

import aiohttp
import psycopg
import pytest

from watch_service.store.cluster import EmbeddedPostgres
from watch_service.store.migrate import migrate
from watch_service.store.search_index import SearchIndex

from ..restore import INDEX_TABLES
from ..support import InProcessService, free_port, unique, wait_for
from . import harness as lv

pytestmark = [pytest.mark.e2e, pytest.mark.pg, pytest.mark.timeout(300)]


@pytest.fixture
def cluster():
    base = Path(tempfile.mkdtemp(prefix="auditsync-restore-"))
    base.chmod(0o755)
    pg = EmbeddedPostgres(base / "pg", free_port())
    try:
        pg.start()
        migrate(pg.url)
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


def copy_data(pg: EmbeddedPostgres, to: Path) -> None:
    """The data folder of a stopped cluster, copied as a file-level backup keeps it."""
    pg.stop()
    subprocess.run(["cp", "-a", str(pg.data_dir), str(to)], check=True)  # owner kept
    pg.start()


def put_back(pg: EmbeddedPostgres, copy: Path) -> None:
    pg.stop()
    shutil.rmtree(pg.data_dir)
    subprocess.run(["cp", "-a", str(copy), str(pg.data_dir)], check=True)
    pg.start()


async def append(http, url: str, topic: str, first: int, last: int, content: str) -> None:
    """Seqs ``first..last``, retried while the service reconnects to a restarted database."""
    body = {"records": [{"data": {"n": n, "content": content}} for n in range(first, last + 1)]}

    async def accepted() -> bool:
        try:
            async with http.post(f"{url}/v0/topics/{topic}/records", json=body) as r:
                if r.status != 200:
                    return False
                ack = await r.json()
        except aiohttp.ClientError:
            return False
        assert (ack["first_seq"], ack["last_seq"]) == (first, last), ack
        return True

    await wait_for(accepted, timeout=60, what=f"seqs {first}-{last} appended")


def landed_through(cfg, run: lv.Running, topic: str, seq: int):
    """Landed durably through ``seq``, and every landed frame indexed."""

    def check() -> bool:
        st = lv.state(cfg)
        indexed = run.sink.spool.state.indexed_frame_no
        return st.get("cursors") == {topic: seq} and indexed == st["frame_no"]

    return check


async def documents(url: str, topic: str) -> dict[int, str]:
    async with await psycopg.AsyncConnection.connect(url) as db:
        cur = await db.execute(
            "SELECT seq, data->>'content' FROM search_documents WHERE topic = %s", (topic,)
        )
        return dict(await cur.fetchall())


async def test_a_sink_running_through_a_restore_indexes_every_seq_written_again(
    cluster, base_settings, http, tmp_path
):
    svc = await InProcessService(base_settings, cluster.url).start()
    topic = unique("restored")
    try:
        async with http.put(f"{svc.url}/v0/topics/{topic}", json={}) as r:
            assert r.status == 201
        cfg = lv.config(tmp_path / "landing", svc.url, topics=(topic,), heartbeat_ms=1000)

        async with lv.running(cfg, SearchIndex(cluster.url)) as run:
            await append(http, svc.url, topic, 1, 200, "alpha")
            await wait_for(landed_through(cfg, run, topic, 200), timeout=30, what="200 indexed")
            await asyncio.to_thread(copy_data, cluster, tmp_path / "copy")
            await append(http, svc.url, topic, 201, 300, "alpha")
            await wait_for(landed_through(cfg, run, topic, 300), timeout=30, what="300 indexed")
            await asyncio.to_thread(put_back, cluster, tmp_path / "copy")
            await append(http, svc.url, topic, 201, 350, "bravo")
            await wait_for(landed_through(cfg, run, topic, 350), timeout=60, what="350 indexed")
            assert not run.task.done()
        assert await documents(cluster.url, topic) == {
            n: ("alpha" if n <= 200 else "bravo") for n in range(1, 351)
        }
    finally:
        await svc.stop()


async def test_an_index_taken_back_alone_is_noticed_and_indexed_again(
    restorable, restore_service, http, tmp_path
):
    url, topic = restore_service.url, unique("index-back")
    async with http.put(f"{url}/v0/topics/{topic}", json={}) as r:
        assert r.status == 201
    cfg = lv.config(tmp_path / "landing", url, topics=(topic,), heartbeat_ms=60000)
    async with lv.running(cfg, SearchIndex(restorable.url)) as run:
        await append(http, url, topic, 1, 200, "alpha")
        await wait_for(landed_through(cfg, run, topic, 200), timeout=30, what="200 indexed")
        backup = await restorable.dump(INDEX_TABLES)
        await append(http, url, topic, 201, 300, "alpha")
        await wait_for(landed_through(cfg, run, topic, 300), timeout=30, what="300 indexed")
        await restorable.restore(backup, INDEX_TABLES)
        assert len(await documents(restorable.url, topic)) == 200
        await append(http, url, topic, 301, 350, "alpha")
        await wait_for(landed_through(cfg, run, topic, 350), timeout=30, what="350 indexed")
        rewinds = run.sink.stats.index_rewinds
    assert await documents(restorable.url, topic) == dict.fromkeys(range(1, 351), "alpha")
    assert rewinds == 1
