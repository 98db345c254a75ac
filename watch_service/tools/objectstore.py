"""A real S3-compatible server on loopback: S3Proxy (Apache-2.0) over a local folder, from the
pinned jar ``make setup`` fetches (``spark_jobs.common.jars.S3PROXY``).

The tests, the demo and ``auditsync objectstore`` use it; compose runs the same jar as its
object-store service. It is a real implementation of the S3 REST API (SigV4, path-style,
multipart uploads, listings with delimiters), not a mock: pyarrow, Hadoop's s3a and pyiceberg
talk to it exactly as to any S3 endpoint.

It refuses unsigned requests. S3Proxy answers a request without a signature as an anonymous
one, allowed where the bucket or object is public-read (gaul/s3proxy issue 236), and its
filesystem backends read "public-read" from the POSIX permissions: others may read the bucket
folder or the object's file. So the buckets are folders of mode 0700 and the server runs with
umask 077 (every object it writes is 0600): an unsigned GET, HEAD or LIST is ``AccessDenied``
(403), as on AWS. A client that forgets to sign fails here as it would in production.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from spark_jobs.common import jars
from watch_service.protocol.errors import AuditsyncError
from watch_service.storage import S3Config
from watch_service.tools.local import free_port

START_TIMEOUT_S = 60.0
ACCESS_KEY = "auditsync"
SECRET_KEY = "auditsync-local-secret"  # a loopback-only server
PRIVATE_UMASK = 0o077  # nothing is public-read, so S3Proxy serves no anonymous request


class ObjectStoreError(AuditsyncError):
    """The server could not start; the message says why and where its log is."""


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


class ObjectStore:
    """One S3Proxy process serving the buckets under ``root/data`` on ``127.0.0.1:port``."""

    def __init__(
        self, root: Path, port: int | None = None, jvm_options: tuple[str, ...] = ()
    ) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self.jvm_options = jvm_options  # given before the server's own -Xmx
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> S3Config:
        return S3Config(endpoint=self.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY)

    @property
    def log_path(self) -> Path:
        return self.root / "s3proxy.log"

    def properties(self) -> str:
        return "\n".join(
            [
                f"s3proxy.endpoint={self.endpoint}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={ACCESS_KEY}",
                f"s3proxy.credential={SECRET_KEY}",
                "jclouds.provider=filesystem-nio2",
                f"jclouds.filesystem.basedir={self.root / 'data'}",
                "",
            ]
        )

    def start(self, buckets: tuple[str, ...] = ()) -> ObjectStore:
        jar = jars.path_of(jars.S3PROXY)
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        for bucket in buckets:
            (self.root / "data" / bucket).mkdir(exist_ok=True)
            (self.root / "data" / bucket).chmod(0o700)
        conf = self.root / "s3proxy.conf"
        conf.write_text(self.properties())
        java = shutil.which("java") or "java"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [java, *self.jvm_options, "-Xmx256m", "-jar", str(jar), "--properties", str(conf)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepts(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ObjectStoreError(
                    f"S3Proxy did not start on {self.endpoint}; see {self.log_path}"
                )
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
