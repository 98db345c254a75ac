"""Whether the checkpoints a run recorded verify, and the fork a run recorded, for the
Reconciliation page (pure: the key comes from the caller).

A run's ``pipeline_runs.checkpoints`` holds, per topic, the signed note it signed (``note``,
with ``size`` and ``root``) and, when a rewound source forked the topic's log, the break
(``fork``: ``seq``, ``range``, ``reason``, and both signed checkpoints ``old`` and ``new``).
:func:`check` opens every one of those notes with the verifier key; a note that does not open,
or whose tree is not the size and root recorded beside it, does not verify, and the page paints
the run red. :func:`fork_of` is what the page says of a break.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from spark_jobs.tlog_store import origin
from watch_service.protocol.tlog import note

from .runs import TopicLine

VERIFIES = "verifies"
NOT_CHECKED = "not checked: no log key"
FAILS = "does not verify"


@dataclasses.dataclass(frozen=True)
class Fork:
    """A recorded break: the first seq the new log differs at, why, and the two trees."""

    seq: int
    spans: tuple[tuple[int, int], ...]
    reason: str
    run_id: str
    old: str  # "size N, root …" of the old log's last checkpoint
    new: str  # of the new log's first


def _shown(signed: str) -> str:
    """``size N, root …`` of a signed checkpoint, read without checking its signature."""
    try:
        cp = note.Checkpoint.parse(signed.rpartition("\n\n")[0] + "\n")
    except note.NoteError:
        return "unreadable checkpoint"
    return f"size {cp.size}, root {base64.b64encode(cp.root).decode()}"


def fork_of(checkpoint: Mapping[str, Any] | None) -> Fork | None:
    """The break ``checkpoint`` (a topic's entry of ``pipeline_runs.checkpoints``) records,
    or None."""
    found = (checkpoint or {}).get("fork")
    if not isinstance(found, Mapping):
        return None
    spans = tuple((int(a), int(b)) for a, b in found.get("range") or ())
    return Fork(
        int(found.get("seq", 0)),
        spans,
        str(found.get("reason", "")),
        str(found.get("run_id") or ""),
        _shown(str(found.get("old", ""))),
        _shown(str(found.get("new", ""))),
    )


def status(topic: str, checkpoint: Mapping[str, Any] | None, verifier: note.Verifier | None) -> str:
    """``""`` when the run recorded no signed note for ``topic``, else ``verifies``,
    ``not checked: no log key`` or ``does not verify: <why>`` (the first note that fails)."""
    cp = checkpoint or {}
    found = cp.get("fork")
    fork: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    notes = [
        (what, text)
        for what, text in (
            ("checkpoint", cp.get("note")),
            ("the fork's old checkpoint", fork.get("old")),
            ("the fork's new checkpoint", fork.get("new")),
        )
        if text
    ]
    if not notes:
        return ""
    if verifier is None:
        return NOT_CHECKED
    for what, text in notes:
        try:
            opened = note.open_checkpoint(str(text), verifier, origin(verifier, topic))
        except note.NoteError as exc:
            return f"{FAILS}: {what}: {exc}"
        root = base64.b64encode(opened.root).decode()
        if what == "checkpoint" and (opened.size, root) != (cp.get("size"), cp.get("root")):
            return f"{FAILS}: the signed tree is not the size and root recorded with the run"
    return VERIFIES


def check(lines: Iterable[TopicLine], verifier: note.Verifier | None) -> None:
    """Set each line's ``signature`` (:func:`status`)."""
    for line in lines:
        line.signature = status(line.topic, line.checkpoint, verifier)
