"""The OpenAPI document (watch_service/server/contract/openapi.json) is valid OpenAPI 3.1,
describes exactly the routes ``create_app`` registers, and is what ``GET /openapi.json`` serves;
real responses match its schemas."""

from __future__ import annotations

import json

import jsonschema
import pytest
from openapi_spec_validator import validate

from tests.support import unique
from watch_service.app import create_app
from watch_service.protocol.errors import ApiError
from watch_service.server.openapi_routes import DOCUMENT_PATH

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def document() -> dict:
    return json.loads(DOCUMENT_PATH.read_text(encoding="utf-8"))


def documented_routes(doc: dict) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    }


def registered_routes(app) -> set[tuple[str, str]]:
    """(method, path) of every route; aiohttp answers HEAD for each GET by itself, so a HEAD
    that mirrors a GET is not a route of its own."""
    found = {(route.method, route.resource.canonical) for route in app.router.routes()}
    return {(m, p) for m, p in found if not (m == "HEAD" and ("GET", p) in found)}


def schema_of(doc: dict, name: str) -> jsonschema.Draft202012Validator:
    """A validator for ``components.schemas[name]`` with the document's other schemas in reach."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.unit
def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1")
    validate(doc)


@pytest.mark.unit
def test_the_document_names_every_registered_route_and_no_other(base_settings) -> None:
    app = create_app(base_settings, "postgresql://unused@127.0.0.1:1/unused")
    documented, registered = documented_routes(document()), registered_routes(app)
    assert documented - registered == set(), "documented but not registered"
    assert registered - documented == set(), "registered but not documented"


@pytest.mark.unit
def test_the_error_schema_is_the_contract_s() -> None:
    error = schema_of(document(), "Error")
    error.validate({"error": {"code": "invalid_request", "message": "topics: too many"}})
    assert not error.is_valid({"error": {"code": "invalid_request"}})
    assert not error.is_valid({"error": {"code": "teapot", "message": "x"}})
    # every code the service can answer with, and no other
    error_schema = document()["components"]["schemas"]["Error"]
    codes = set(error_schema["properties"]["error"]["properties"]["code"]["enum"])
    assert codes == {cls.code for cls in _subclasses(ApiError)}


def _subclasses(cls: type) -> set[type]:
    found = {cls}
    for sub in cls.__subclasses__():
        found |= _subclasses(sub)
    return found


@pytest.mark.service
async def test_the_service_serves_the_document(service, http) -> None:
    async with http.get(f"{service.url}/openapi.json") as r:
        assert r.status == 200
        assert r.content_type == "application/json"
        assert await r.read() == DOCUMENT_PATH.read_bytes()


@pytest.mark.service
async def test_the_document_is_open_when_keys_are_configured(make_service, http, tmp_path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(
        '[[keys]]\nid = "k"\nsecret_sha256 = "' + "0" * 64 + '"\nscopes = ["read"]\n'
        'prefixes = [""]\n'
    )
    svc = await make_service(keys_file=keys)
    async with http.get(f"{svc.url}/openapi.json") as r:
        assert r.status == 200
    async with http.get(f"{svc.url}/v0/topics") as r:
        assert r.status == 401


@pytest.mark.service
async def test_real_responses_match_the_schemas(service, http) -> None:
    doc, topic = document(), unique("openapi")
    async with http.put(f"{service.url}/v0/topics/{topic}", json={"max_records": 2}) as r:
        assert r.status == 201
        schema_of(doc, "Topic").validate(await r.json())
    async with http.post(
        f"{service.url}/v0/topics/{topic}/records",
        json={"records": [{"data": i, "tag": "t"} for i in range(3)]},
    ) as r:
        schema_of(doc, "AppendResult").validate(await r.json())
    async with http.get(f"{service.url}/v0/topics/{topic}/records?from_seq=0") as r:
        page = await r.json()
        schema_of(doc, "RecordPage").validate(page)
        assert "tombstone" in page
    async with http.post(f"{service.url}/v0/watch", json={"topics": {topic: {}}}) as r:
        schema_of(doc, "WatchSession").validate(await r.json())
    for method, path, status in [
        ("GET", f"/v0/topics/{unique('missing')}", 404),
        ("POST", "/v0/watch", 400),
    ]:
        async with http.request(
            method, f"{service.url}{path}", data=b"{}", headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == status
            schema_of(doc, "Error").validate(await r.json())


@pytest.mark.unit
def test_the_rewound_frame_is_the_documented_shape() -> None:
    from watch_service.protocol import frames

    rewound = schema_of(document(), "RewoundFrame")
    rewound.validate(json.loads(frames.rewound_data("orders", "source_rewound", 201, 300, 200)))
    assert not rewound.is_valid(json.loads(frames.rewound_data("orders", "cap", 201, 300, 200)))
