"""Bearer keys from the TOML file named by ``AUDITSYNC_KEYS_FILE``: the one place every
surface (HTTP topics and watch, Permify REST, the SpiceDB and Permify gRPC surfaces)
authenticates, with the same keys and the same scopes.

Only the SHA-256 of each secret is stored. No file, or a file with no keys: dev mode, all
open; any key configured: nothing is open. ``?token=`` counts as a credential only where the
caller says so (the SSE GET routes). A surface turns a credential into a :class:`Key` with
``KeyRing.authenticate`` (an HTTP ``Authorization`` header or gRPC ``authorization`` metadata,
both ``Bearer <secret>``) and checks it with :func:`authorize` (scope + the topic's prefix);
``KeyRing.check`` does both in one call for the gRPC surfaces.

``AUDITSYNC_GRPC_KEY`` is deprecated: it is one more key of the ring (id ``grpc-key``, every
scope, every prefix) valid on every surface, so setting it alone turns auth on everywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from watch_service.protocol.errors import AuditsyncError, Forbidden, Unauthorized

SCOPES = frozenset({"read", "write", "admin"})
LEGACY_GRPC_KEY_ID = "grpc-key"
log = logging.getLogger("auditsync.auth")


class KeyFileError(AuditsyncError):
    pass


@dataclasses.dataclass(frozen=True)
class Key:
    id: str
    secret_sha256: str
    scopes: frozenset[str]
    prefixes: tuple[str, ...]

    def may_touch(self, topic: str) -> bool:
        return any(topic.startswith(p) for p in self.prefixes)

    def can(self, scope: str, topic: str | None = None) -> bool:
        """Whether this key has ``scope`` and (if given) may touch ``topic``."""
        return scope in self.scopes and (topic is None or self.may_touch(topic))


@dataclasses.dataclass(frozen=True)
class KeyRing:
    by_hash: Mapping[str, Key]

    @property
    def enabled(self) -> bool:
        return bool(self.by_hash)

    @classmethod
    def load(cls, path: Path | None, legacy_grpc_key: str | None = None) -> KeyRing:
        """The keys of ``path`` (None: none), plus the deprecated ``AUDITSYNC_GRPC_KEY``."""
        ring = cls._load_file(path)
        if legacy_grpc_key is None:
            return ring
        log.warning(
            "AUDITSYNC_GRPC_KEY is deprecated: it is a full-scope key on every surface; "
            "move it to AUDITSYNC_KEYS_FILE as a [[keys]] entry with the scopes it needs"
        )
        digest = hash_secret(legacy_grpc_key)
        legacy = Key(LEGACY_GRPC_KEY_ID, digest, SCOPES, ("",))
        return cls({**ring.by_hash, digest: legacy})

    @classmethod
    def _load_file(cls, path: Path | None) -> KeyRing:
        if path is None:
            return cls({})
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise KeyFileError(f"AUDITSYNC_KEYS_FILE: cannot read {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise KeyFileError(f"AUDITSYNC_KEYS_FILE: {path} is not valid TOML: {exc}") from None
        unknown_tables = set(doc) - {"keys"}
        if unknown_tables:  # a typo like [[key]] must not silently mean "dev mode, all open"
            raise KeyFileError(
                f"AUDITSYNC_KEYS_FILE: {path}: unknown table(s) "
                f"{sorted(unknown_tables)} (expected [[keys]] entries)"
            )
        if not isinstance(doc.get("keys", []), list):
            raise KeyFileError(
                f"AUDITSYNC_KEYS_FILE: {path}: keys must be an array of tables ([[keys]])"
            )
        keys: dict[str, Key] = {}
        for i, entry in enumerate(doc.get("keys", [])):
            where = f"AUDITSYNC_KEYS_FILE: {path}: keys[{i}]"
            if not isinstance(entry, dict):
                raise KeyFileError(f"{where}: expected a table")
            unknown = set(entry) - {"id", "secret_sha256", "scopes", "prefixes"}
            if unknown:
                raise KeyFileError(f"{where}: unknown field(s) {sorted(unknown)}")
            digest = str(entry.get("secret_sha256", "")).lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise KeyFileError(f"{where}: secret_sha256 must be 64 hex digits")
            scopes = entry.get("scopes", [])
            if not isinstance(scopes, list) or not set(scopes) <= SCOPES:
                raise KeyFileError(f"{where}: scopes must be a subset of {sorted(SCOPES)}")
            prefixes = entry.get("prefixes", [""])
            if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes):
                raise KeyFileError(f"{where}: prefixes must be a list of strings")
            key_id = entry.get("id")
            if not isinstance(key_id, str) or not key_id:
                raise KeyFileError(f"{where}: id must be a non-empty string")
            keys[digest] = Key(key_id, digest, frozenset(scopes), tuple(prefixes))
        return cls(keys)

    def authenticate(
        self,
        authorization: str | None,
        query_token: str | None = None,
        allow_query_token: bool = False,
    ) -> Key | None:
        """The presented key, or None in dev mode. Raises 401 for none/unknown."""
        if not self.enabled:
            return None
        secret = None
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise Unauthorized("Authorization: expected 'Bearer <key>'")
            secret = value.strip()
        elif query_token is not None:
            if not allow_query_token:
                raise Unauthorized(
                    "?token= is accepted only on SSE stream routes; "
                    "send Authorization: Bearer <key>"
                )
            secret = query_token
        if secret is None:
            raise Unauthorized("missing bearer key (Authorization: Bearer <key>)")
        key = self.by_hash.get(hash_secret(secret))
        if key is None:
            raise Unauthorized("unknown bearer key")
        return key

    def check(
        self, metadata: Iterable[tuple[str, str | bytes]] | None, scope: str, topic: str | None
    ) -> Key | None:
        """A gRPC call's key: ``authorization`` metadata authenticated, then ``scope`` and
        ``topic`` authorized; raises 401 / 403 like an HTTP route (the caller maps them to
        UNAUTHENTICATED / PERMISSION_DENIED)."""
        key = self.authenticate(metadata_authorization(metadata))
        authorize(key, scope, topic)
        return key


def metadata_authorization(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The ``authorization`` value of a gRPC call's metadata (the last one), as text; None
    when there is none. The one place every gRPC surface reads it."""
    value: str | bytes | None = None
    for name, item in metadata or ():
        if name.lower() == "authorization":
            value = item
    if isinstance(value, bytes):  # a -bin header; a key is text
        value = value.decode("utf-8", "surrogateescape")
    return value


def hash_secret(secret: str) -> str:
    """The hex SHA-256 of ``secret`` as UTF-8. A secret that is not text (aiohttp hands on
    undecodable header bytes as surrogate escapes) matches no key: 401, not a crash."""
    try:
        data = secret.encode()
    except UnicodeEncodeError:
        raise Unauthorized("the bearer key is not valid UTF-8") from None
    return hashlib.sha256(data).hexdigest()


def authorize(key: Key | None, scope: str, topic: str | None = None) -> None:
    """Raise 403 unless ``key`` (None = dev mode) has ``scope`` and may touch ``topic``."""
    if key is None:
        return
    if scope not in key.scopes:
        raise Forbidden(f"key {key.id!r} lacks the {scope!r} scope")
    if topic is not None and not key.may_touch(topic):
        raise Forbidden(f"topic {topic!r} is outside the prefixes of key {key.id!r}")
