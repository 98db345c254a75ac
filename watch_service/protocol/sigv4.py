"""AWS Signature Version 4 for one S3 GET, path-style: pure (checked against AWS's published
example), so ``watch_service.storage`` can read an object in one GET.

pyarrow reads an S3 object as a HEAD (for its size) followed by ranged GETs, so an object
replaced between the two comes back as a mix of two versions: a ``state.json`` rewritten while
a sensor reads it can arrive cut short. A single GET is answered from one version, whole, by
the store's contract.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import urllib.parse
from collections.abc import Mapping

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


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
