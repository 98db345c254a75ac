"""TLS on the SpiceDB surface: seed 001's Python examples run against it with the official
``authzed`` client, ``bearer_token_credentials`` and the server's self-signed certificate
(made here with ``cryptography``) as the root.

The examples are the seed's text with only these edits: the target and token are this
server's, the certificate is passed as ``bearer_token_credentials``' root, ``WatchRequest{}``
(a typo in the seed) is ``WatchRequest()``, and each ``# process the update`` placeholder is a
line that records the response (and ends that example once it has what it waits for).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import ipaddress
import threading
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from watch_service import settings as settings_mod
from watch_service.compat.proto import permify_base_v1_pb2 as pb
from watch_service.settings import SettingsError

from ..support import InProcessService, free_port
from .clients import GRPC_KEY, permify_grpc_client
from .spicedb_support import Op, define, unique_type, update, write

pytestmark = pytest.mark.service


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
async def tls_service(pg_url, base_settings, tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    settings = dataclasses.replace(
        base_settings,
        grpc_port=free_port(),
        permify_grpc_port=free_port(),
        grpc_key=GRPC_KEY,
        grpc_tls_cert=cert,
        grpc_tls_key=key,
        spicedb_checkpoint_ms=100,
    )
    svc = await InProcessService(settings, pg_url).start()
    svc.grpc_target = f"localhost:{settings.grpc_port}"
    svc.cert = cert.read_bytes()
    svc.permify_port = settings.permify_grpc_port
    yield svc
    await svc.stop()


CALLING_WATCH = """
from authzed.api.v1 import (
    Client, WatchRequest
)
from grpcutil import bearer_token_credentials

client = Client(
    TARGET,
    bearer_token_credentials(TOKEN, CERT),
)

watcher = client.Watch(WatchRequest())
for resp in watcher:
  got.append(resp); break
"""

HISTORICAL = """
from authzed.api.v1 import (
    Client, WatchRequest
)
from grpcutil import bearer_token_credentials

client = Client(
    TARGET,
    bearer_token_credentials(TOKEN, CERT),
)

watcher = client.Watch(WatchRequest(
  optional_start_cursor=last_zed_token
))
for resp in watcher:
  got.append(resp); break
"""

CONTINUOUS = """
from authzed.api.v1 import (
    Client, WatchRequest
)
from grpcutil import bearer_token_credentials

client = Client(
    TARGET,
    bearer_token_credentials(TOKEN, CERT),
)

last_zed_token = None
while not_canceled:
  try:
    watcher = client.Watch(WatchRequest(
      optional_start_cursor=last_zed_token
    ))
    for resp in watcher:
      got.append(resp); watchers.append(watcher)
      last_zed_token = resp.changes_through
  except Exception:
    # log exception
    continue
"""


class Flag:
    """``not_canceled`` of the seed's loop: true until the test sets the event."""

    def __init__(self) -> None:
        self.stop = threading.Event()

    def __bool__(self) -> bool:
        return not self.stop.is_set()


class Got(list):
    """The responses an example records; ``wait`` blocks until one passes ``predicate``."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def append(self, item) -> None:
        with self.changed:
            super().append(item)
            self.changed.notify_all()

    def wait(self, predicate, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self), timeout)


def run_example(source: str, svc, **names) -> tuple[threading.Thread, dict]:
    scope = {"TARGET": svc.grpc_target, "TOKEN": GRPC_KEY, "CERT": svc.cert, "got": Got()}
    scope |= names
    thread = threading.Thread(target=exec, args=(source, scope), daemon=True)
    thread.start()
    return thread, scope


async def test_seed_001_examples_over_tls(tls_service):
    from authzed.api.v1 import Client
    from grpcutil import bearer_token_credentials

    creds = bearer_token_credentials(GRPC_KEY, tls_service.cert)
    # made off the event loop: in a thread with a running loop the client would be its async kind
    client = await asyncio.to_thread(Client, tls_service.grpc_target, creds)
    doc = unique_type()
    await define(client, doc)
    first = await write(client, update(Op.OPERATION_TOUCH, f"{doc}:0", "owner", "user:a"))

    historical, h = run_example(HISTORICAL, tls_service, last_zed_token=first.written_at)
    flag = Flag()
    continuous, c = run_example(CONTINUOUS, tls_service, not_canceled=flag, watchers=[])
    live, w = run_example(CALLING_WATCH, tls_service)
    tokens: list[str] = []
    # the two from-now watches see only writes after they opened, which the client cannot
    # observe: write until both have seen one (each write is one revision), bounded
    for i in range(50):
        resp = await write(client, update(Op.OPERATION_TOUCH, f"{doc}:{i + 1}", "owner", "user:b"))
        tokens.append(resp.written_at.token)
        if await asyncio.to_thread(w["got"].wait, bool, 0.2) and c["got"].wait(bool, 0):
            break
    await asyncio.to_thread(historical.join, 10)
    await asyncio.to_thread(live.join, 10)
    last = tokens[-1]
    assert await asyncio.to_thread(
        c["got"].wait, lambda got: bool(got) and got[-1].changes_through.token == last, 10
    )
    flag.stop.set()
    c["watchers"][-1].cancel()
    await asyncio.to_thread(continuous.join, 10)
    assert not (historical.is_alive() or live.is_alive() or continuous.is_alive())
    assert [r.changes_through.token for r in h["got"]] == [tokens[0]]
    assert w["got"][0].changes_through.token in tokens
    seen = [r.changes_through.token for r in c["got"]]
    assert seen == tokens[-len(seen) :]  # from when it opened, each revision once, in order


async def test_tls_settings_fail_clearly(pg_url, base_settings, tmp_path):
    with pytest.raises(SettingsError, match="set both"):
        settings_mod.load({"AUDITSYNC_GRPC_TLS_CERT": str(tmp_path / "a.crt")})
    _, key = self_signed(tmp_path)
    missing = dataclasses.replace(
        base_settings,
        grpc_port=free_port(),
        grpc_tls_cert=tmp_path / "missing.crt",
        grpc_tls_key=key,
    )
    svc = InProcessService(missing, pg_url)
    try:
        with pytest.raises(SettingsError, match="AUDITSYNC_GRPC_TLS_CERT: cannot read"):
            await svc.start()
    finally:
        await svc.stop()  # what start-up had opened (the pool) is closed again


async def test_permify_grpc_over_tls(tls_service):
    """The Permify surface shares the TLS settings: a TLS client works, a plaintext one cannot
    even start a call."""
    secure = permify_grpc_client(tls_service.permify_port, root_cert=tls_service.cert)
    plain = permify_grpc_client(tls_service.permify_port)
    try:
        tenant = f"tls-{free_port()}"
        created = await secure.tenancy.Create(
            pb.TenantCreateRequest(id=tenant, name="tls"),
            metadata=(("authorization", f"Bearer {GRPC_KEY}"),),
        )
        assert created.tenant.id == tenant
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await plain.tenancy.List(pb.TenantListRequest(page_size=1), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await secure.channel.close()
        await plain.channel.close()
