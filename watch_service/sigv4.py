"""One S3 object in one GET, signed with AWS Signature Version 4 (path-style).

pyarrow reads an S3 object as a HEAD (for its size) followed by ranged GETs, so an object
replaced between the two comes back as a mix of two versions: a ``state.json`` rewritten while
a sensor reads it can arrive cut short. A single GET is answered from one version, whole, by
the store's contract. ``watch_service.storage`` uses this for :meth:`Storage.read_bytes` on
S3 and pyarrow for everything else (immutable Parquet segments, listings, writes).

:func:`sign` is pure (checked against AWS's published example); :func:`get_object` does the
request with the standard library.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
TIMEOUT_S = 30.0


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(
    method: str,
    host: str,
    path: str,
    headers: Mapping[str, str],
    access_key: str,
    secret_key: str,
    region: str,
    when: dt.datetime,
) -> dict[str, str]:
    """The request's headers with ``x-amz-date``, ``x-amz-content-sha256`` (an empty body)
    and ``Authorization`` added; ``path`` already URI-encoded, no query."""
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{amz_date[:8]}/{region}/s3/aws4_request"
    out = {k.lower(): v.strip() for k, v in headers.items()}
    out.update({"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": amz_date})
    names = sorted(out)
    canonical = "\n".join(
        [
            method,
            path,
            "",
            "".join(f"{name}:{out[name]}\n" for name in names),
            ";".join(names),
            EMPTY_SHA256,
        ]
    )
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + secret_key).encode(), amz_date[:8])
    for part in (region, "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return out


def object_url(endpoint: str | None, region: str, bucket: str, key: str) -> tuple[str, str, str]:
    """(url, host header, encoded path) of an object, path-style."""
    base = endpoint or f"https://s3.{region}.amazonaws.com"
    parts = urllib.parse.urlsplit(base)
    path = "/" + urllib.parse.quote(f"{bucket}/{key}", safe="/-_.~")
    return f"{parts.scheme}://{parts.netloc}{path}", parts.netloc, path


def get_object(
    endpoint: str | None,
    region: str,
    bucket: str,
    key: str,
    access_key: str | None,
    secret_key: str | None,
    session_token: str | None = None,
) -> bytes | None:
    """The object's bytes from one GET; None when there is no such key (404)."""
    url, host, path = object_url(endpoint, region, bucket, key)
    headers: dict[str, str] = {"x-amz-security-token": session_token} if session_token else {}
    if access_key and secret_key:
        now = dt.datetime.now(dt.UTC)
        headers = sign("GET", host, path, headers, access_key, secret_key, region, now)
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        body = exc.read()[:300].decode(errors="replace").replace("\n", " ")
        raise OSError(f"GET {url}: HTTP {exc.code} {exc.reason}: {body}") from None
    except urllib.error.URLError as exc:
        raise OSError(f"GET {url}: {exc.reason}") from None
