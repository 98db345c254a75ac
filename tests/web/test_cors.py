"""CORS is a setting (``AUDITSYNC_CORS_ORIGINS``, default off): an allowed origin's preflight is
answered before routing and auth, and every response to it, errors and SSE streams included,
names the origin; other origins and the default service get no CORS headers."""

from __future__ import annotations

import pytest

from tests.support import unique
from watch_service.settings import SettingsError, load

pytestmark = pytest.mark.service

APP = "http://app.example:3000"


def test_origins_setting_is_checked():
    assert load({"AUDITSYNC_CORS_ORIGINS": f"{APP}, https://b.example"}).cors_origins == (
        APP,
        "https://b.example",
    )
    assert load({}).cors_origins == ()
    with pytest.raises(SettingsError, match="^AUDITSYNC_CORS_ORIGINS: 'http://a/path' is not"):
        load({"AUDITSYNC_CORS_ORIGINS": "http://a/path"})


async def test_allowed_origin(make_service, http, tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text(
        '[[keys]]\nid = "k"\nscopes = ["read", "write", "admin"]\n'
        'secret_sha256 = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"\n'
    )
    svc = await make_service(cors_origins=(APP,), keys_file=keys)
    topic = unique("cors")
    preflight = {"Origin": APP, "Access-Control-Request-Method": "POST"}
    async with http.options(f"{svc.url}/v0/topics/{topic}/records", headers=preflight) as r:
        assert r.status == 204
        assert r.headers["Access-Control-Allow-Origin"] == APP
        assert "POST" in r.headers["Access-Control-Allow-Methods"]
        assert "Authorization" in r.headers["Access-Control-Allow-Headers"]
    async with http.options(
        f"{svc.url}/v0/topics", headers={**preflight, "Origin": "http://evil.example"}
    ) as r:
        assert r.status in (401, 405)
        assert "Access-Control-Allow-Origin" not in r.headers
    auth = {"Origin": APP, "Authorization": "Bearer secret"}
    async with http.put(f"{svc.url}/v0/topics/{topic}", json={}, headers=auth) as r:
        assert r.status == 201 and r.headers["Access-Control-Allow-Origin"] == APP
        assert "Origin" in r.headers.getall("Vary")
    async with http.get(f"{svc.url}/v0/topics/{topic}", headers={"Origin": APP}) as r:
        assert r.status == 401  # an error still tells the browser it may read it
        assert r.headers["Access-Control-Allow-Origin"] == APP
    async with http.post(
        f"{svc.url}/v0/watch", json={"topics": {topic: {"from_seq": 0}}}, headers=auth
    ) as r:
        wid = (await r.json())["wid"]
    async with http.get(
        f"{svc.url}/v0/watch/{wid}", headers={**auth, "Accept": "text/event-stream"}
    ) as r:
        assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == APP


async def test_default_is_off(service, http):
    preflight = {"Origin": APP, "Access-Control-Request-Method": "GET"}
    async with http.options(f"{service.url}/v0/topics", headers=preflight) as r:
        assert r.status == 405
        assert "Access-Control-Allow-Origin" not in r.headers
    async with http.get(f"{service.url}/v0/topics", headers={"Origin": APP}) as r:
        assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers
