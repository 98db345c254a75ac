"""``GET /v0/search`` over the search index: values are indexed (not keys), hits are ranked,
pages follow their opaque cursor without repeats or gaps, the key's scope and prefixes bound
what is searched, and bad parameters are 400s with the contract body. Documents are written by
the index's real writer (the sink's and the backfill's)."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import call, unique
from watch_service.store.search_index import upsert_documents
from watch_service.web.auth import hash_secret

from .test_openapi import document, schema_of

pytestmark = [pytest.mark.pg, pytest.mark.service]


async def index(pg_url: str, records: list[tuple]) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await upsert_documents(conn, records)


async def search(http, base: str, key: str | None = None, **params) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return await call(http, "GET", f"{base}/v0/search", params=params, headers=headers)


async def test_values_are_indexed_not_keys(pg_url, service, http):
    topic, word = unique("s"), unique("w").replace("-", "")
    await index(pg_url, [(topic, 1, 10, None, f'{{"amount_{word}": 12345, "note": "{word}"}}')])
    status, page = await search(http, service.url, q=word, topic=topic)
    assert status == 200
    assert [(h["key"], h["$seq"], h["data"]["note"]) for h in page["results"]] == [
        (f"{topic}/1", 1, word)
    ]
    schema_of(document(), "SearchPage").validate(page)
    status, by_key = await search(http, service.url, q=f"amount_{word}", topic=topic)
    assert (status, by_key["results"]) == (200, [])
    status, by_number = await search(http, service.url, q="12345", topic=topic)
    assert [h["key"] for h in by_number["results"]] == [f"{topic}/1"]


async def test_hits_are_ranked_best_first(pg_url, service, http):
    topic, word = unique("s"), unique("w").replace("-", "")
    await index(
        pg_url,
        [
            (topic, 1, 1, "once", f'{{"t": "{word} alpha beta gamma delta"}}'),
            (topic, 2, 2, "thrice", f'{{"t": "{word} {word} {word}", "u": ["{word}"]}}'),
            (topic, 3, 3, "none", '{"t": "nothing here"}'),
        ],
    )
    status, page = await search(http, service.url, q=word, topic=topic)
    assert status == 200
    assert [h["$tag"] for h in page["results"]] == ["thrice", "once"]
    assert page["results"][0]["rank"] > page["results"][1]["rank"] > 0
    assert page["next_cursor"] is None


async def test_pages_follow_the_cursor(pg_url, service, http):
    topic, word = unique("s"), unique("w").replace("-", "")
    await index(pg_url, [(topic, seq, seq, None, f'{{"t": "{word}"}}') for seq in range(1, 6)])
    seen, cursor, pages = [], None, 0
    while True:
        params = {"q": word, "topic": topic, "limit": "2"}
        if cursor:
            params["cursor"] = cursor
        status, page = await search(http, service.url, **params)
        assert status == 200
        seen += [h["$seq"] for h in page["results"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert sorted(seen) == [1, 2, 3, 4, 5] and len(seen) == 5
    # a cursor belongs to its own query
    _, first = await search(http, service.url, q=word, topic=topic, limit="2")
    status, body = await search(
        http, service.url, q=word + "x", topic=topic, cursor=first["next_cursor"]
    )
    assert status == 400 and body["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({}, "q: required"),
        ({"q": " "}, "q: required"),
        ({"q": "x" * 257}, "q: 257 characters"),
        ({"q": "a", "limit": "0"}, "limit: 0 is out of range"),
        ({"q": "a", "limit": "ten"}, "limit: expected an integer"),
        ({"q": "a", "cursor": "bm9wZQ"}, "cursor: not a cursor"),
        ({"q": "a", "topic": "bad name!"}, "topic"),
        ({"q": "a", "sort": "x"}, "unknown parameter(s) sort"),
    ],
)
async def test_bad_parameters_are_400(service, http, params, names):
    status, body = await search(http, service.url, **params)
    assert status == 400
    assert body["error"]["code"] == "invalid_request"
    assert names in body["error"]["message"]


async def test_scope_and_prefixes_bound_the_search(pg_url, make_service, http, tmp_path):
    word = unique("w").replace("-", "")
    mine, theirs = unique("mine"), unique("theirs")
    await index(
        pg_url,
        [(mine, 1, 1, None, f'{{"t": "{word}"}}'), (theirs, 1, 1, None, f'{{"t": "{word}"}}')],
    )
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "reader"\nsecret_sha256 = "{hash_secret("r")}"\n'
        f'scopes = ["read"]\nprefixes = ["{mine}"]\n'
        f'[[keys]]\nid = "writer"\nsecret_sha256 = "{hash_secret("w")}"\nscopes = ["write"]\n'
    )
    svc = await make_service(keys_file=keys)
    status, page = await search(http, svc.url, "r", q=word)
    assert status == 200 and [h["topic"] for h in page["results"]] == [mine]
    status, body = await search(http, svc.url, "r", q=word, topic=theirs)
    assert status == 403 and body["error"]["code"] == "forbidden"
    status, body = await search(http, svc.url, "w", q=word)
    assert status == 403 and "'read' scope" in body["error"]["message"]
    status, body = await search(http, svc.url, q=word)
    assert status == 401 and body["error"]["code"] == "unauthorized"
