"""A topic log on an ``s3://`` warehouse (the session's S3 server, ``spark_jobs.tlog_store``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.tlog_store import TlogError, TopicLog
from tests.support import ON_S3
from watch_service.storage import Storage

from .test_tlog_store import SIGNER, entries, files

pytestmark = pytest.mark.s3


@ON_S3
def test_on_s3_the_log_is_the_same_objects_and_proves(landing_location, tmp_path: Path) -> None:
    """The tiles and checkpoints on an ``s3://`` warehouse (the session's S3 server): the same
    objects, byte for byte, as on a local folder; a proof read back from S3 verifies; an
    overwritten tile there is refused before anything is signed over it."""
    from spark_jobs.tlog_command import prove

    s3 = TopicLog.at(landing_location, "orders", SIGNER.verifier)
    local = TopicLog.at(Storage.at(tmp_path), "orders", SIGNER.verifier)
    for log in (s3, local):
        log.append(SIGNER, entries(1, 300), run_id="r1")
        log.append(SIGNER, entries(301, 515), run_id="r2")
    on_s3 = {
        p: landing_location.read_bytes(f"tlog/orders/{p}") for p in files(tmp_path / "tlog/orders")
    }
    assert on_s3 == files(tmp_path / "tlog" / "orders")
    got = prove(s3, 300, "r1")
    assert (got.index, got.extra) == (299, entries(300, 300)[0])
    assert got.verify(entries(300, 300)[0], SIGNER.verifier, "PeterNeumann/orders") == 300
    landing_location.write_bytes("tlog/orders/tile/0/002.p/3", bytes(96))
    with pytest.raises(TlogError, match=r"right edge \(tile/0/002.p/3, tile/1/000.p/2\)"):
        s3.append(SIGNER, entries(516, 516))
