"""``GET /openapi.json``: the HTTP contract as an OpenAPI 3.1 document.

The document is ``contract/openapi.json`` beside this module, written by hand next to the prose
contract (``contract/http-api.md``) and read once when the module is imported, so a broken file
fails at start, not on the first request. tests/web/test_openapi.py keeps it valid and equal, route
for route, to what ``create_app`` registers. It is served without authentication: it describes
the API, it holds no data.
"""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp import web

DOCUMENT_PATH = Path(__file__).resolve().parent / "contract" / "openapi.json"


def load_document(path: Path = DOCUMENT_PATH) -> bytes:
    """The document's bytes, checked to be a JSON object naming its OpenAPI version."""
    raw = path.read_bytes()
    doc = json.loads(raw)
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3.1"):
        raise ValueError(f"{path}: not an OpenAPI 3.1 document")
    return raw


DOCUMENT = load_document()
routes = web.RouteTableDef()


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.Response(
        body=DOCUMENT,
        content_type="application/json",
        headers={"Cache-Control": "public, max-age=300"},
    )
