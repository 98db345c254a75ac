"""C2SP ``tlog-proof``: one entry's index, its inclusion proof and the signed checkpoint, as
text that verifies offline::

    c2sp.org/tlog-proof@v1
    [extra <base64>]
    index <N>
    <base64 hash, the leaf's sibling first>
    ...
    <blank line>
    <the signed checkpoint, verbatim>
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re

from watch_service.protocol.tlog import merkle
from watch_service.protocol.tlog.note import NoteError, Verifier, open_checkpoint

HEADER = "c2sp.org/tlog-proof@v1"


@dataclasses.dataclass(frozen=True)
class Proof:
    index: int
    path: tuple[bytes, ...]
    checkpoint: str  # the signed note
    extra: bytes | None = None

    def text(self) -> str:
        lines = [HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines += [base64.b64encode(h).decode() for h in self.path]
        return "\n".join(lines) + "\n\n" + self.checkpoint

    @classmethod
    def parse(cls, text: str) -> Proof:
        head, sep, checkpoint = text.partition("\n\n")
        lines = head.split("\n")
        if not sep or lines[0] != HEADER:
            raise NoteError(f"a tlog proof starts with {HEADER} and has a blank line")
        extra = None
        at = 1
        if len(lines) > at and lines[at].startswith("extra "):
            extra = _b64(lines[at][6:])
            at += 1
        m = re.fullmatch(r"index (0|[1-9][0-9]*)", lines[at] if len(lines) > at else "")
        if m is None:
            raise NoteError("a tlog proof has an 'index N' line")
        path = tuple(_b64(line) for line in lines[at + 1 :])
        if any(len(h) != 32 for h in path):
            raise NoteError("an inclusion proof hash is not 32 bytes")
        return cls(int(m.group(1)), path, checkpoint, extra)

    def verify(self, leaf: bytes, verifier: Verifier, origin: str) -> int:
        """Check the signature and that ``leaf`` (its bytes) is entry ``index``; returns the
        checkpoint's tree size."""
        cp = open_checkpoint(self.checkpoint, verifier, origin)
        merkle.verify_inclusion(self.index, cp.size, merkle.leaf_hash(leaf), self.path, cp.root)
        return cp.size


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{text!r} is not base64") from None
