"""Bearer keys from the TOML file named by ``AUDITSYNC_KEYS_FILE``.

Only the SHA-256 of each secret is stored. No file, or a file with no keys: dev mode, all
open. ``?token=`` counts as a credential only where the caller says so (the SSE GET routes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import tomllib
from collections.abc import Mapping
from pathlib import Path

from watch_service.protocol.errors import AuditsyncError, Forbidden, Unauthorized

SCOPES = frozenset({"read", "write", "admin"})


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


@dataclasses.dataclass(frozen=True)
class KeyRing:
    by_hash: Mapping[str, Key]

    @property
    def enabled(self) -> bool:
        return bool(self.by_hash)

    @classmethod
    def load(cls, path: Path | None) -> KeyRing:
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


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def authorize(key: Key | None, scope: str, topic: str | None = None) -> None:
    """Raise 403 unless ``key`` (None = dev mode) has ``scope`` and may touch ``topic``."""
    if key is None:
        return
    if scope not in key.scopes:
        raise Forbidden(f"key {key.id!r} lacks the {scope!r} scope")
    if topic is not None and not key.may_touch(topic):
        raise Forbidden(f"topic {topic!r} is outside the prefixes of key {key.id!r}")
