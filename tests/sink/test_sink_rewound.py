"""The sink across a source that goes back: the database is restored from a backup taken at
seq 200 after the sink had landed and indexed 300. The sink lands the ``rewound`` frame as one
exact row, its resume cursor goes back to the head (in memory, in ``state.json``), and the
search index ends up holding what indexing the source now would give: the records written
again at 201.., a tag's document taken over by its new seq, and nothing of the seqs the
source no longer has."""

from __future__ import annotations

import psycopg
import pytest

from watch_service.store.search_index import SearchIndex

from ..support import unique, wait_for
from ..watch.wire import cursor_id
from . import harness as lv

pytestmark = [pytest.mark.e2e, pytest.mark.pg]

TAGGED = {150: "doc-k", 250: "doc-k", 210: "doc-k"}  # one document key over three seqs


def batch(first: int, last: int, content: str, tagged: dict[int, str]) -> dict:
    return {
        "records": [
            {"data": {"n": n, "content": content}, **({"tag": tagged[n]} if n in tagged else {})}
            for n in range(first, last + 1)
        ]
    }


async def documents(db, topic: str) -> dict[str, tuple[int, str]]:
    cur = await db.execute(
        "SELECT doc_key, seq, data->>'content' FROM search_documents WHERE topic = %s", (topic,)
    )
    return {key: (seq, content) for key, seq, content in await cur.fetchall()}


def expected_documents(topic: str, spans: list[tuple[int, int, str]]) -> dict:
    """What indexing ``spans`` of the source from scratch gives: newest seq per key."""
    out: dict[str, tuple[int, str]] = {}
    for first, last, content in spans:
        for n in range(first, last + 1):
            key = f"{topic}/{TAGGED[n]}" if n in TAGGED else f"{topic}/{n}"
            out[key] = (n, content)
    return out


async def test_the_sink_lands_a_rewind_moves_back_and_replaces_its_copies(
    restorable, restore_service, http, tmp_path
):
    url, topic = restore_service.url, unique("rewound")
    async with http.put(f"{url}/v0/topics/{topic}", json={}) as r:
        assert r.status == 201

    async def append(first: int, last: int, content: str) -> None:
        body = batch(first, last, content, TAGGED)
        async with http.post(f"{url}/v0/topics/{topic}/records", json=body) as r:
            assert r.status == 200, await r.text()

    cfg = lv.config(tmp_path / "landing", url, topics=(topic,), heartbeat_ms=60000)
    folder = cfg
    async with await psycopg.AsyncConnection.connect(restorable.url, autocommit=True) as db:

        def landed_through(run: lv.Running, seq: int):
            """Landed durably through ``seq``, and every landed frame indexed."""

            def check() -> bool:
                st = lv.state(folder)
                indexed = run.sink.spool.state.indexed_frame_no
                return st.get("cursors") == {topic: seq} and indexed == st["frame_no"]

            return check

        async def session_at(seq: int) -> bool:
            cur = await db.execute("SELECT cursors FROM watch_sessions WHERE wid = %s", (wid,))
            return (await cur.fetchone())[0] == {topic: seq}

        await append(1, 200, "kept")
        async with lv.running(cfg, SearchIndex(restorable.url)) as run:
            await wait_for(landed_through(run, 200), timeout=20, what="200 landed and indexed")
            wid = lv.state(folder)["wid"]
            await wait_for(lambda: session_at(200), what="the session's cursor flushed at 200")
            backup = await restorable.dump()
            await append(201, 300, "lost")
            await wait_for(landed_through(run, 300), timeout=20, what="300 landed and indexed")
            await run.stop()
        assert await documents(db, topic) == expected_documents(
            topic, [(1, 200, "kept"), (201, 300, "lost")]
        )

        await restorable.restore(backup)  # head 200, the session row as it was then
        async with lv.running(cfg, SearchIndex(restorable.url)) as run:
            await wait_for(landed_through(run, 200), timeout=20, what="the cursor back at 200")
            (rewound,) = [r for r in lv.rows(folder) if r["kind"] == "rewound"]
            assert rewound == {
                "consumer": "c1",
                "filter_node": None,
                "frame_no": rewound["frame_no"],
                "frame_id": cursor_id({topic: 200}),
                "received_ms": rewound["received_ms"],
                "kind": "rewound",
                "topic": topic,
                "cursor": 200,
                "seq": None,
                "ts": None,
                "tag": None,
                "node": None,
                "meta": None,
                "data": None,
                "data_sha256": None,
                "reason": "source_rewound",
                "gap_from": 201,
                "gap_to": 300,
                "head_seq": 200,
            }
            assert lv.state(folder)["last_id"] == cursor_id({topic: 200})

            await append(201, 260, "rewritten")
            await wait_for(landed_through(run, 260), timeout=20, what="the rewritten seqs indexed")
            after = [r for r in lv.rows(folder) if r["frame_no"] > rewound["frame_no"]]
            records = [r for r in after if r["kind"] == "record"]
            assert [r["seq"] for r in records] == list(range(201, 261))
            assert {r["data"] for r in records} == {
                f'{{"n":{n},"content":"rewritten"}}' for n in range(201, 261)
            }
            assert run.sink.stats.duplicates == 0
        assert await documents(db, topic) == expected_documents(
            topic, [(1, 200, "kept"), (201, 260, "rewritten")]
        )
