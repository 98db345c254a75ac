"""The sink kept running, never restarted, through a restore of the database its search index
lives in (issue 32): the index alone taken back to a backup while the source kept everything.
The sink's state still says those documents were indexed; the index's own mark
(``search_index_marks``) says otherwise, and the sink re-indexes from it. Without the mark the
documents the restore took away were never written again.

(The whole database put back, with seqs written again after it under the running sink, is not
tested here: whether the sink is told of the rewritten seqs depends on whether they are written
before it reconnects, so its index may keep the landing's old copies until verify's index check
repairs them: ``tests/spark/test_index_verify.py``.)
"""

from __future__ import annotations

import aiohttp
import psycopg
import pytest

from watch_service.store.search_index import SearchIndex

from ..restore import INDEX_TABLES
from ..support import unique, wait_for
from . import harness as lv

pytestmark = [pytest.mark.e2e, pytest.mark.pg, pytest.mark.timeout(300)]


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
