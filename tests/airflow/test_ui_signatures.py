"""What the Reconciliation page says of a run's recorded checkpoints
(``auditsync_plugin.ui.signatures``, pure): each signed note opened with the log key, a fork's
two included; a note that does not open, or whose tree is not the one recorded beside it, does
not verify; without a key nothing is checked."""

from __future__ import annotations

import base64

import pytest

from auditsync_plugin.ui import signatures
from watch_service.protocol.tlog import note

pytestmark = pytest.mark.unit

SIGNER = note.Signer.generate("auditsync.test/page")
ROOT = bytes(range(32))


def signed(topic: str, size: int, root: bytes = ROOT, signer: note.Signer = SIGNER) -> str:
    return signer.sign(note.Checkpoint(f"{signer.name}/{topic}", size, root).text())


def recorded(size: int = 12, **extra) -> dict:
    return {"size": size, "root": base64.b64encode(ROOT).decode(),
            "note": signed("orders", size), **extra}  # fmt: skip


def test_each_signed_note_is_opened_with_the_key() -> None:
    key = SIGNER.verifier
    fork = {"seq": 6, "range": [[6, 10]], "reason": "source_rewound", "run_id": "r2",
            "old": signed("orders", 10), "new": signed("orders", 12)}  # fmt: skip
    assert signatures.status("orders", recorded(fork=fork), key) == signatures.VERIFIES
    assert signatures.status("orders", recorded(), None) == signatures.NOT_CHECKED
    assert signatures.status("orders", {"old_size": 8}, key) == ""  # failed before signing
    assert signatures.status("orders", None, key) == ""
    other = note.Signer.generate("auditsync.test/page")
    assert signatures.status(
        "orders", recorded(fork={**fork, "old": signed("orders", 10, signer=other)}), key
    ) == (
        f"does not verify: the fork's old checkpoint: the note has no signature of "
        f"{key.name}+{key.id:08x}"
    )
    assert signatures.status("payments", recorded(), key) == (
        "does not verify: checkpoint: the checkpoint is of 'auditsync.test/page/orders', not "
        "'auditsync.test/page/payments'"
    )
    assert signatures.status("orders", {**recorded(), "size": 13}, key) == (
        "does not verify: the signed tree is not the size and root recorded with the run"
    )


def test_a_recorded_fork_reads_as_where_why_and_both_trees() -> None:
    fork = {"seq": 6, "range": [[6, 10]], "reason": "source_rewound", "run_id": "r2",
            "old": signed("orders", 10), "new": "not a note"}  # fmt: skip
    root = base64.b64encode(ROOT).decode()
    assert signatures.fork_of(recorded(fork=fork)) == signatures.Fork(
        6, ((6, 10),), "source_rewound", "r2", f"size 10, root {root}", "unreadable checkpoint"
    )
    assert signatures.fork_of(recorded()) is None
