"""Sessions and auth with keys configured: every route but the public ones authenticates before
anything else (an unknown wid without a key is 401, and the session GC does not run for such a
caller); a session created in dev mode no longer opens; each key holds a capped number of
sessions; and the app's own GC task reclaims idle sessions with no watch traffic at all.

This module's keyed service has a 60 s session ttl and its periodic GC effectively off, and
its sessions are backdated by two minutes: only this service's own GC (the shared service's
ttl is 300 s) can reclaim them, and only when a request makes it run.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import replace

import pytest

from tests.support import InProcessService, call, unique, wait_for
from tests.watch.wire import SSE

pytestmark = [pytest.mark.service, pytest.mark.pg]

CAP = 3
SECRETS = {k: f"{k}-{uuid.uuid4().hex}" for k in ("admin", "reader", "capped")}


def key_hash(key_id: str) -> str:
    return hashlib.sha256(SECRETS[key_id].encode()).hexdigest()


def bearer(key_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[key_id]}"}


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


@pytest.fixture(scope="module")
async def keyed(pg_url, base_settings, tmp_path_factory):
    keys = tmp_path_factory.mktemp("session-keys") / "keys.toml"
    keys.write_text(
        "".join(
            f'[[keys]]\nid = "{key_id}"\n'
            f'secret_sha256 = "{key_hash(key_id)}"\n'
            'scopes = ["read", "write", "admin"]\nprefixes = [""]\n'
            for key_id in SECRETS
        )
    )
    settings = replace(
        base_settings,
        keys_file=keys,
        max_sessions_per_key=CAP,
        session_ttl_ms=60_000,
        session_gc_interval_s=3600,
    )
    svc = await InProcessService(settings, pg_url).start()
    yield svc
    await svc.stop()


async def new_session(http, url: str, key_id: str | None) -> str:
    topic = unique("sess")
    headers = bearer(key_id or "admin")
    assert (await call(http, "PUT", f"{url}/v0/topics/{topic}", json={}, headers=headers))[0] in (
        200,
        201,
    )
    status, body = await call(
        http,
        "POST",
        f"{url}/v0/watch",
        json={"topics": {topic: {}}},
        headers=bearer(key_id) if key_id else {},
    )
    assert status == 200, body
    return body["wid"]


async def backdate(db, wid: str) -> None:
    await db.execute(
        "UPDATE watch_sessions SET last_active_at = now() - interval '2 minutes' WHERE wid = %s",
        (wid,),
    )


async def exists(db, wid: str) -> bool:
    cur = await db.execute("SELECT 1 FROM watch_sessions WHERE wid = %s", (wid,))
    return await cur.fetchone() is not None


async def test_without_a_key_everything_but_the_public_routes_is_401_first(keyed, http):
    missing = error("unauthorized", "missing bearer key (Authorization: Bearer <key>)")
    unknown_wid = "wid_AAAAAAAAAAAAAAAAAAAAAA"
    for path, with_key in [
        (f"/v0/watch/{unknown_wid}", 404),
        ("/v0/watch/%00", 404),
        ("/v0/topics/bad%20name", 400),
        ("/v0/topics/bad%20name/records", 400),
        ("/v0/no-such-route", 404),
    ]:
        assert await call(http, "GET", keyed.url + path, headers=SSE) == (401, missing), path
        status, body = await call(http, "GET", keyed.url + path, headers={**SSE, **bearer("admin")})
        assert status == with_key and body["error"]["code"] != "unauthorized", (path, body)
    for path in ("/healthz", "/readyz", "/openapi.json"):
        assert (await call(http, "GET", keyed.url + path))[0] == 200, path
    async with http.get(keyed.url + "/metrics") as r:
        assert r.status == 200


async def test_the_gc_does_not_run_for_an_unauthenticated_caller(keyed, http, db):
    wid = await new_session(http, keyed.url, "reader")
    await backdate(db, wid)
    for headers in ({}, {"Authorization": "Bearer not-a-key"}):
        status, body = await call(http, "GET", f"{keyed.url}/v0/watch/{wid}", headers=headers)
        assert (status, body["error"]["code"]) == (401, "unauthorized")
    assert await exists(db, wid)  # no GC pass ran for those
    status, body = await call(
        http, "GET", f"{keyed.url}/v0/watch/{wid}", headers={**SSE, **bearer("reader")}
    )
    assert (status, body["error"]["code"]) == (404, "not_found")  # authenticated: GC, then 404
    assert not await exists(db, wid)


async def test_a_session_created_in_dev_mode_does_not_open_once_keys_are_configured(
    keyed, service, http
):
    wid = await new_session(http, service.url, None)  # the shared dev-mode service
    for headers in (bearer("reader"), bearer("admin")):
        status, body = await call(
            http, "GET", f"{keyed.url}/v0/watch/{wid}", headers={**SSE, **headers}
        )
        assert (status, body) == (
            401,
            error(
                "unauthorized",
                "this session was created while the service ran without keys; it does not "
                "open now that keys are configured: POST /v0/watch again with your key",
            ),
        )


async def test_each_key_holds_at_most_its_cap_of_sessions(keyed, http, db):
    held = [await new_session(http, keyed.url, "capped") for _ in range(CAP)]
    topic = unique("sess")
    await call(http, "PUT", f"{keyed.url}/v0/topics/{topic}", json={}, headers=bearer("admin"))
    watch = {"topics": {topic: {}}}
    over = await call(http, "POST", f"{keyed.url}/v0/watch", json=watch, headers=bearer("capped"))
    assert over == (
        429,
        error(
            "throttled",
            f"key 'capped' already holds {CAP} watch sessions, its cap of {CAP} "
            "(AUDITSYNC_MAX_SESSIONS_PER_KEY); reuse a wid, or let idle ones expire",
        ),
    )
    # Another key is not affected; an expired session frees its slot (the POST's GC pass).
    assert (await call(http, "POST", f"{keyed.url}/v0/watch", json=watch, headers=bearer("admin")))[
        0
    ] == 200
    await backdate(db, held[0])
    ok = await call(http, "POST", f"{keyed.url}/v0/watch", json=watch, headers=bearer("capped"))
    assert ok[0] == 200 and not await exists(db, held[0])


async def test_concurrent_posts_never_overshoot_the_cap(keyed, http, db):
    topic = unique("sess")
    await call(http, "PUT", f"{keyed.url}/v0/topics/{topic}", json={}, headers=bearer("admin"))
    await db.execute("DELETE FROM watch_sessions WHERE key_hash = %s", (key_hash("reader"),))
    results = await asyncio.gather(
        *(
            call(
                http,
                "POST",
                f"{keyed.url}/v0/watch",
                json={"topics": {topic: {}}},
                headers=bearer("reader"),
            )
            for _ in range(12)
        )
    )
    assert sorted(status for status, _ in results) == [200] * CAP + [429] * (12 - CAP)
    cur = await db.execute(
        "SELECT count(*) FROM watch_sessions WHERE key_hash = %s", (key_hash("reader"),)
    )
    assert await cur.fetchone() == (CAP,)


async def test_the_periodic_gc_reclaims_idle_sessions_without_traffic(make_service, http, db):
    svc = await make_service(session_ttl_ms=60_000, session_gc_interval_s=0.2)
    wid = await new_session(http, svc.url, None)
    await backdate(db, wid)

    async def gone() -> bool:
        return not await exists(db, wid)

    await wait_for(gone, 5, "the periodic GC to reclaim the idle session")
    # The loop is the app's: stopping the service cancels it.
    running = sum(t.get_name() == "session-gc" for t in asyncio.all_tasks())
    await svc.stop()
    assert sum(t.get_name() == "session-gc" for t in asyncio.all_tasks()) == running - 1
