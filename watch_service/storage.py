"""The one module that names a landing or warehouse location: a local path, ``file://…`` or
``s3://bucket/prefix``, and the filesystem that reaches it.

Everything else takes a :class:`Location` (what the user wrote, parsed once) and a
:class:`Storage` (the location with its filesystem) from here, and never calls ``os`` or
``pathlib`` on a landing or warehouse location. A scheme this module does not support
(``gs://``, ``abfss://``, a typo such as ``s3:/x``) is refused with :class:`StorageError`,
never taken for a relative path.

S3-compatible stores are addressed path-style. The endpoint and region come from the standard
AWS variables (``AWS_ENDPOINT_URL``, ``AWS_REGION``) or are given explicitly (:class:`S3Config`,
e.g. from an Airflow ``aws`` connection). Credentials are explicit keys when some are given,
else a named profile, else the AWS default credential chain, which every client walks itself:
the environment (``AWS_ACCESS_KEY_ID``…), the shared config and credentials files with
``AWS_PROFILE``, web identity (IRSA), container and instance metadata, and SSO. Each client that
reaches the store is a maintained one, configured here: pyarrow's S3 filesystem (the sink, the
plugin), botocore (a whole object in one GET), Hadoop's s3a (the Spark steps) and pyiceberg
(the CLI and the UI reading Iceberg tables without a JVM). Nothing here signs a request.

Writes are whole objects: on a local disk a temp file, fsync and rename (atomic and durable);
on object storage one PUT (atomic by the store's contract). Nothing here renames to commit
anything on object storage; the table format owns the warehouse's commits. ``move`` (local
disks only) puts the folders of an old warehouse layout aside once they are converted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from watch_service.protocol.errors import AuditsyncError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

SCHEMES = ("file", "s3")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
TMP_PREFIX = ".tmp-"
DEFAULT_REGION = "us-east-1"
GET_TIMEOUT_S = 30.0
# s3a's providers: explicit keys, a named profile, and the SDK's default chain (environment,
# web identity, profiles with SSO and roles, container and instance metadata).
S3A_SIMPLE = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
S3A_TEMPORARY = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
S3A_PROFILE = "org.apache.hadoop.fs.s3a.auth.ProfileAWSCredentialsProvider"
S3A_DEFAULT_CHAIN = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"


class StorageError(AuditsyncError):
    """A location cannot be used: an unsupported scheme, a malformed bucket, missing settings.
    Commands print the message in one line and exit 2."""


@dataclasses.dataclass(frozen=True)
class Location:
    """A parsed location. ``scheme`` is ``file`` (``path`` absolute) or ``s3`` (``bucket`` and a
    key prefix ``path`` without leading or trailing slash, possibly empty)."""

    scheme: str
    path: str
    bucket: str = ""

    @classmethod
    def parse(cls, text: str | os.PathLike[str]) -> Location:
        raw = os.fspath(text).strip()
        if not raw:
            raise StorageError("empty location: give a path, file:///… or s3://bucket/prefix")
        m = _SCHEME_RE.match(raw)
        if m is None:
            return cls("file", str(Path(raw).expanduser().resolve()))
        scheme = m.group(1).lower()
        parsed = urllib.parse.urlsplit(raw)
        if scheme not in SCHEMES or not raw[m.end() :].startswith("//"):
            raise StorageError(
                f"unsupported location {raw!r}: use a local path, file:///absolute/path or "
                f"s3://bucket/prefix (supported schemes: {', '.join(SCHEMES)})"
            )
        if parsed.query or parsed.fragment:
            raise StorageError(f"location {raw!r}: no query or fragment allowed")
        if scheme == "file":
            if parsed.netloc not in ("", "localhost"):
                raise StorageError(f"location {raw!r}: file:// takes no host (file:///abs/path)")
            path = urllib.parse.unquote(parsed.path)
            if not path.startswith("/"):
                raise StorageError(f"location {raw!r}: file:// needs an absolute path")
            return cls("file", str(Path(path).resolve()))
        bucket = parsed.netloc
        if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
            raise StorageError(
                f"location {raw!r}: {bucket!r} is not a valid bucket name (3-63 characters: "
                f"lower-case letters, digits, dots and hyphens)"
            )
        prefix = urllib.parse.unquote(parsed.path).strip("/")
        if any(part in (".", "..") for part in prefix.split("/")) or "//" in prefix:
            raise StorageError(f"location {raw!r}: the prefix holds an empty, . or .. part")
        return cls("s3", prefix, bucket)

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def uri(self) -> str:
        """The canonical text: ``file:///abs`` or ``s3://bucket/prefix``."""
        if self.is_local:
            return Path(self.path).as_uri()
        return f"s3://{self.bucket}/{self.path}".rstrip("/")

    @property
    def hadoop_uri(self) -> str:
        """What Spark (Hadoop's filesystems) is given: ``file:/abs`` or ``s3a://bucket/prefix``."""
        if self.is_local:
            return Path(self.path).as_uri()
        return f"s3a://{self.bucket}/{self.path}".rstrip("/")

    @property
    def fs_path(self) -> str:
        """The path pyarrow's filesystem of this location takes."""
        if self.is_local:
            return self.path
        return f"{self.bucket}/{self.path}".rstrip("/")

    def join(self, *parts: str) -> Location:
        rel = PurePosixPath(*parts) if parts else PurePosixPath()
        if rel.is_absolute() or ".." in rel.parts:
            raise StorageError(f"{'/'.join(parts)!r}: not a relative path inside {self.uri}")
        if self.is_local:
            return Location("file", str(Path(self.path, *rel.parts)))
        joined = "/".join(p for p in (self.path, str(rel)) if p and p != ".")
        return Location("s3", joined, self.bucket)

    def local_path(self) -> Path:
        """The local folder of a ``file`` location (for tools that only work locally)."""
        if not self.is_local:
            raise StorageError(f"{self.uri} is not on a local filesystem")
        return Path(self.path)

    def __str__(self) -> str:
        return self.uri


@dataclasses.dataclass(frozen=True)
class S3Config:
    """How to reach an S3-compatible store. ``endpoint`` None means AWS itself. Credentials:
    ``access_key`` and ``secret_key`` when both are given, else the named ``profile`` of the
    shared config and credentials files, else the AWS default credential chain (which reads
    ``AWS_PROFILE`` itself). The secret and the session token stay out of ``repr`` (a logged
    configuration shows neither)."""

    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    session_token: str | None = dataclasses.field(default=None, repr=False)
    region: str = DEFAULT_REGION
    profile: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> S3Config:
        env = os.environ if environ is None else environ
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        if endpoint and not endpoint.startswith(("http://", "https://")):
            raise StorageError(f"AWS_ENDPOINT_URL={endpoint!r}: expected http(s)://host[:port]")
        return cls(
            endpoint=endpoint,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        )

    def environ(self) -> dict[str, str]:
        """The same settings as the standard AWS variables (for a child process)."""
        pairs = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_SESSION_TOKEN": self.session_token,
            "AWS_REGION": self.region,
            "AWS_PROFILE": self.profile,
        }
        return {k: v for k, v in pairs.items() if v}

    @property
    def has_keys(self) -> bool:
        return bool(self.access_key and self.secret_key)

    def profile_keys(self) -> tuple[str, str, str | None]:
        """The named profile's credentials now (botocore resolves it: static keys, a role,
        SSO, a credential process), for a client that takes keys but no profile name."""
        import botocore.exceptions
        import botocore.session

        try:
            found = botocore.session.Session(profile=self.profile).get_credentials()
        except botocore.exceptions.BotoCoreError as exc:
            raise StorageError(f"AWS profile {self.profile!r}: {exc}") from None
        if found is None:
            raise StorageError(f"AWS profile {self.profile!r}: it holds no credentials")
        keys = found.get_frozen_credentials()
        return keys.access_key, keys.secret_key, keys.token

    def keys(self) -> tuple[str, str, str | None] | None:
        """Keys for a client that takes no profile name: the explicit ones, the named
        profile's, or None for the client's own default chain."""
        if self.access_key and self.secret_key:
            return self.access_key, self.secret_key, self.session_token
        return self.profile_keys() if self.profile else None

    @property
    def secure(self) -> bool:
        return not (self.endpoint or "").startswith("http://")

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop s3a settings (without the ``spark.hadoop.`` prefix), path-style."""
        conf = {
            "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.connection.ssl.enabled": "true" if self.secure else "false",
        }
        if self.endpoint:
            conf["fs.s3a.endpoint"] = self.endpoint
        if self.access_key and self.secret_key:
            conf["fs.s3a.access.key"] = self.access_key
            conf["fs.s3a.secret.key"] = self.secret_key
            if self.session_token:
                conf["fs.s3a.session.token"] = self.session_token
                conf["fs.s3a.aws.credentials.provider"] = S3A_TEMPORARY
            else:
                conf["fs.s3a.aws.credentials.provider"] = S3A_SIMPLE
        elif self.profile:
            conf["fs.s3a.auth.profile.name"] = self.profile
            conf["fs.s3a.aws.credentials.provider"] = f"{S3A_PROFILE},{S3A_DEFAULT_CHAIN}"
        else:
            conf["fs.s3a.aws.credentials.provider"] = S3A_DEFAULT_CHAIN
        return conf

    def pyiceberg_properties(self) -> dict[str, str]:
        props = {"s3.region": self.region, "s3.force-virtual-addressing": "false"}
        if self.endpoint:
            props["s3.endpoint"] = self.endpoint
        keys = self.keys()  # None: pyarrow's default chain, as for ``filesystem``
        if keys is not None:
            props["s3.access-key-id"], props["s3.secret-access-key"] = keys[0], keys[1]
            if keys[2]:
                props["s3.session-token"] = keys[2]
        return props

    def filesystem(self) -> pafs.FileSystem:
        import pyarrow.fs as pafs

        options: dict[str, object] = {
            "region": self.region,
            "force_virtual_addressing": False,
            "allow_bucket_creation": False,
            "allow_delayed_open": True,  # a small object is one PutObject, not a multipart upload
        }
        if self.endpoint:
            parsed = urllib.parse.urlsplit(self.endpoint)
            options["endpoint_override"] = parsed.netloc
            options["scheme"] = parsed.scheme
        keys = self.keys()  # None: the AWS C++ SDK's default chain
        if keys is not None:
            options.update(access_key=keys[0], secret_key=keys[1], session_token=keys[2])
        return pafs.S3FileSystem(**options)


def hadoop_conf(locations: list[Location], s3: S3Config | None = None) -> dict[str, str]:
    """The Hadoop settings Spark needs for these locations (s3a only where one is on S3)."""
    if all(loc.is_local for loc in locations):
        return {}
    return (s3 or S3Config.from_env()).hadoop_conf()


class Storage:
    """A location and the filesystem that reaches it: the one door to its files.

    Paths given to the methods are relative to the location, ``/``-separated."""

    def __init__(self, location: Location, s3: S3Config | None = None) -> None:
        self.location = location
        self._s3 = s3
        self._fs: pafs.FileSystem | None = None

    @classmethod
    def at(cls, text: str | os.PathLike[str], s3: S3Config | None = None) -> Storage:
        return cls(Location.parse(text), s3)

    @property
    def s3(self) -> S3Config:
        if self._s3 is None:
            self._s3 = S3Config.from_env()
        return self._s3

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            import pyarrow.fs as pafs

            self._fs = pafs.LocalFileSystem() if self.location.is_local else self.s3.filesystem()
        return self._fs

    def child(self, *parts: str) -> Storage:
        """The storage of a sub-location, sharing this one's filesystem."""
        out = Storage(self.location.join(*parts), self._s3)
        out._fs = self._fs
        return out

    def path(self, rel: str = "") -> str:
        """The filesystem path of ``rel`` (for pyarrow calls that take a path and ``fs``)."""
        return self.location.join(rel).fs_path if rel else self.location.fs_path

    def uri(self, rel: str = "") -> str:
        return self.location.join(rel).uri if rel else self.location.uri

    # -- whole objects -------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the folder (local) or check the bucket answers (S3); clear errors if not."""
        import pyarrow.fs as pafs

        if self.location.is_local:
            Path(self.location.path).mkdir(parents=True, exist_ok=True)
            return
        try:
            info = self.fs.get_file_info(self.location.bucket)
        except OSError as exc:
            raise StorageError(f"{self.location.uri}: the object store refused: {exc}") from None
        if info.type == pafs.FileType.NotFound:
            raise StorageError(
                f"{self.location.uri}: bucket {self.location.bucket!r} does not exist "
                f"(endpoint {self.s3.endpoint or 'AWS'})"
            )

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Make ``rel`` hold ``data``, all or nothing, durably: locally a temp file, fsync,
        rename, folder fsync; on S3 one PutObject (above pyarrow's part size, one multipart
        upload, visible only once completed; an interrupted one is left for the bucket's
        lifecycle rule to abort)."""
        if self.location.is_local:
            target = Path(self.path(rel))
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f"{TMP_PREFIX}{target.name}")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            _fsync_dir(target.parent)
            return
        with self.fs.open_output_stream(self.path(rel)) as out:
            out.write(data)

    def read_bytes(self, rel: str) -> bytes | None:
        """The object's bytes, one whole version of it; None when there is none. On S3 one
        GetObject through botocore: pyarrow's HEAD + ranged GET could mix two versions of an
        object replaced in between, such as a ``state.json`` a live sink rewrites."""
        if not self.location.is_local:
            return _s3_get(self.s3, self.location.join(rel) if rel else self.location)
        try:  # a plain read: importing pyarrow would cost a short command most of its time
            with open(self.path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def exists(self, rel: str = "") -> bool:
        import pyarrow.fs as pafs

        return self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound

    def is_folder(self, rel: str = "") -> bool:
        import pyarrow.fs as pafs

        return self.fs.get_file_info(self.path(rel)).type == pafs.FileType.Directory

    def move(self, rel: str, to: str) -> None:
        """Rename a file or folder to ``to`` (its parent created), durably. Local only: a
        rename on object storage is a copy of every object, and nothing that must be atomic
        may rest on one there, so it is refused."""
        if not self.location.is_local:
            raise StorageError(f"{self.uri(rel)}: moving is supported on a local disk only")
        target = Path(self.path(to))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.path(rel), target)
        _fsync_dir(target.parent)
        _fsync_dir(Path(self.path(rel)).parent)

    def delete(self, rel: str) -> None:
        """Delete one file; nothing when it is not there."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(rel))

    def remove_temp_files(self, rel: str = "") -> list[str]:
        """Delete the temp files a crash left in a local folder (they never became visible
        under a real name); names of those removed. Nothing on S3, where writes are one PUT."""
        if not self.location.is_local:
            return []
        folder = Path(self.path(rel))
        if not folder.is_dir():
            return []
        stale = sorted(p for p in folder.iterdir() if p.name.startswith(TMP_PREFIX))
        for p in stale:
            p.unlink()
        return [p.name for p in stale]

    def lock_file(self, rel: str) -> LocalLock | None:
        """An exclusive ``flock`` on the local file ``rel`` (created if missing), held until
        released or the process ends; None when another process holds it. Local only: an
        object store has no locks (see the sink's PostgreSQL advisory lock)."""
        if not self.location.is_local:
            raise StorageError(f"{self.uri(rel)}: file locks exist only on a local filesystem")
        target = Path(self.path(rel))
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return LocalLock(fd)

    def delete_tree(self, rel: str = "") -> None:
        """Delete a folder (prefix) and everything under it; nothing when it is not there."""
        import pyarrow.fs as pafs

        target = self.path(rel)
        if self.fs.get_file_info(target).type == pafs.FileType.NotFound:
            return
        self.fs.delete_dir(target)

    def files(self, rel: str = "", recursive: bool = False) -> list[tuple[str, int]]:
        """``(name relative to rel, size)`` of the files under ``rel``, sorted; temp files
        and dot-names excluded; empty when the folder does not exist."""
        return sorted(self._walk(rel, recursive, want_dirs=False))

    def folders(self, rel: str = "") -> list[str]:
        """Names of the folders directly under ``rel``, sorted."""
        return sorted(name for name, _ in self._walk(rel, False, want_dirs=True))

    def listing(self, rel: str = "") -> tuple[list[str], list[tuple[str, float]]]:
        """One folder's direct content in one listing (on S3 one delimiter LIST per 1,000
        entries): its sub-folder names and ``(file name, modified seconds since the epoch)``,
        sorted; temp files and dot-names excluded; empty when the folder does not exist."""
        import pyarrow.fs as pafs

        base = self.path(rel).rstrip("/")
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=False)
        folders: list[str] = []
        files: list[tuple[str, float]] = []
        for info in self.fs.get_file_info(selector):
            name = info.base_name
            if name.startswith("."):
                continue
            if info.type == pafs.FileType.Directory:
                folders.append(name)
            elif info.type == pafs.FileType.File:
                mtime = info.mtime
                files.append((name, mtime.timestamp() if mtime is not None else 0.0))
        return sorted(folders), sorted(files)

    def _walk(self, rel: str, recursive: bool, want_dirs: bool) -> Iterator[tuple[str, int]]:
        import pyarrow.fs as pafs

        base = self.path(rel).rstrip("/")
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=recursive)
        for info in self.fs.get_file_info(selector):
            name = info.path[len(base) + 1 :] if info.path.startswith(base + "/") else info.path
            if any(part.startswith(".") for part in name.split("/")):
                continue
            if want_dirs and info.type == pafs.FileType.Directory:
                yield name, 0
            elif not want_dirs and info.type == pafs.FileType.File:
                yield name, info.size or 0

    # -- Parquet -------------------------------------------------------------------------

    def write_parquet(self, rel: str, table: pa.Table) -> None:
        """One Parquet file, whole or not at all (see ``write_bytes``)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.write_bytes(rel, sink.getvalue().to_pybytes())

    def parquet_schema(self, rel: str) -> pa.Schema:
        import pyarrow.parquet as pq

        return pq.read_schema(self.path(rel), filesystem=self.fs)

    def read_parquet(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        import pyarrow.parquet as pq

        return pq.read_table(self.path(rel), columns=columns, filesystem=self.fs)


class LocalLock:
    """A held ``flock`` (see :meth:`Storage.lock_file`)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@functools.lru_cache(maxsize=16)
def _s3_client(s3: S3Config) -> Any:
    """A botocore S3 client for these settings (clients are thread-safe and costly to make:
    one per configuration). Checksums only where S3 requires them, as for s3a, so that
    S3-compatible stores that predate the 2025 checksum defaults answer too."""
    import botocore.config
    import botocore.session

    session = botocore.session.Session(profile=None if s3.has_keys else s3.profile)
    config = botocore.config.Config(
        s3={"addressing_style": "path"},
        connect_timeout=GET_TIMEOUT_S,
        read_timeout=GET_TIMEOUT_S,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    explicit: dict[str, str | None] = {}
    if s3.has_keys:
        explicit = {
            "aws_access_key_id": s3.access_key,
            "aws_secret_access_key": s3.secret_key,
            "aws_session_token": s3.session_token,
        }
    return session.create_client(
        "s3", region_name=s3.region, endpoint_url=s3.endpoint, config=config, **explicit
    )


def _s3_get(s3: S3Config, location: Location) -> bytes | None:
    """One GetObject of the object at ``location``; None when S3 says ``NoSuchKey``."""
    import botocore.exceptions

    client = _s3_client(s3)
    try:
        response = client.get_object(Bucket=location.bucket, Key=location.path)
        with response["Body"] as body:
            return bytes(body.read())
    except client.exceptions.NoSuchKey:
        return None
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        raise OSError(
            f"GET {location.uri}: {error.get('Code', '?')}: {error.get('Message', '')}"
        ) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise OSError(f"GET {location.uri}: {exc}") from None


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
