"""C2SP ``signed-note`` with Ed25519 keys, in the text forms ``golang.org/x/mod/sumdb/note``
reads and writes, and the C2SP ``tlog-checkpoint`` note text.

- signer key ``PRIVATE+KEY+<name>+<id>+<base64(0x01 || 32-byte seed)>``;
- verifier key ``<name>+<id>+<base64(0x01 || 32-byte public key)>``;
- key id: the first 4 bytes of SHA-256(name || 0x0A || 0x01 || public key), 8 hex digits;
- note: text (ending in a newline), a blank line, then ``— <name> <base64(id || signature)>``
  lines, the signature being Ed25519 over the text;
- checkpoint text: origin, tree size, base64 root hash, then optional extension lines.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import re

from watch_service.protocol.errors import AuditsyncError

ALG_ED25519 = 0x01
DASH = "\u2014"
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


class NoteError(AuditsyncError):
    """A key, note or checkpoint that is malformed or does not verify; the message says why."""


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def key_id(name: str, public: bytes) -> int:
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public).digest()
    return int.from_bytes(digest[:4], "big")


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{what} is not base64") from None


def _public_of(seed: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclasses.dataclass(frozen=True)
class Verifier:
    name: str
    id: int
    public: bytes

    @classmethod
    def parse(cls, vkey: str) -> Verifier:
        parts = vkey.strip().split("+", 2)
        if (
            len(parts) != 3
            or not _valid_name(parts[0])
            or not re.fullmatch(r"[0-9a-f]{8}", parts[1])
        ):
            raise NoteError("a verifier key is <name>+<8 hex digits>+<base64 key>")
        raw = _b64(parts[2], "the verifier key's key")
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise NoteError("the verifier key is not an Ed25519 key (0x01 and 32 bytes)")
        verifier = cls(parts[0], int(parts[1], 16), raw[1:])
        if key_id(verifier.name, verifier.public) != verifier.id:
            raise NoteError(f"the verifier key's id {parts[1]} does not match its name and key")
        return verifier

    def __str__(self) -> str:
        key = base64.b64encode(bytes([ALG_ED25519]) + self.public).decode()
        return f"{self.name}+{self.id:08x}+{key}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclasses.dataclass(frozen=True)
class Signer:
    name: str
    seed: bytes = dataclasses.field(repr=False)

    @classmethod
    def generate(cls, name: str) -> Signer:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
        )

        if not _valid_name(name):
            raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")
        seed = Ed25519PrivateKey.generate().private_bytes(
            Encoding.Raw, PrivateFormat.Raw, NoEncryption()
        )
        return cls(name, seed)

    @classmethod
    def parse(cls, skey: str) -> Signer:
        parts = skey.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"] or not _valid_name(parts[2]):
            raise NoteError("a signing key is PRIVATE+KEY+<name>+<8 hex digits>+<base64 key>")
        raw = _b64(parts[4], "the signing key's key")
        if len(raw) != 33 or raw[0] != ALG_ED25519 or not re.fullmatch(r"[0-9a-f]{8}", parts[3]):
            raise NoteError("the signing key is not an Ed25519 key (0x01 and a 32-byte seed)")
        signer = cls(parts[2], raw[1:])
        if signer.verifier.id != int(parts[3], 16):
            raise NoteError(f"the signing key's id {parts[3]} does not match its name and key")
        return signer

    @property
    def verifier(self) -> Verifier:
        public = _public_of(self.seed)
        return Verifier(self.name, key_id(self.name, public), public)

    def __str__(self) -> str:
        key = base64.b64encode(bytes([ALG_ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.id:08x}+{key}"

    def sign(self, text: str) -> str:
        """``text`` as a signed note with this key's one signature."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        _check_text(text)
        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(text.encode())
        blob = self.verifier.id.to_bytes(4, "big") + signature
        return f"{text}\n{DASH} {self.name} {base64.b64encode(blob).decode()}\n"


def _check_text(text: str) -> None:
    if not text.endswith("\n") or _CONTROL.search(text):
        raise NoteError("a note's text ends in a newline and holds no other control character")


def open_note(note: str, verifier: Verifier) -> str:
    """The text of ``note`` once ``verifier``'s signature on it checks; other keys' signatures
    are ignored, as signed-note requires."""
    text, sep, sigs = note.rpartition("\n\n")
    if not sep or not sigs.endswith("\n"):
        raise NoteError("not a signed note: no blank line before the signature lines")
    text += "\n"
    _check_text(text)
    found = False
    for line in sigs[:-1].split("\n"):
        m = re.fullmatch(DASH + r" (\S+) ([A-Za-z0-9+/=]+)", line)
        if m is None:
            raise NoteError(f"malformed signature line {line!r}")
        blob = _b64(m.group(2), "a signature")
        if len(blob) < 5:
            raise NoteError(f"signature of {m.group(1)} is too short")
        if m.group(1) != verifier.name or int.from_bytes(blob[:4], "big") != verifier.id:
            continue
        if not verifier.verify(text.encode(), blob[4:]):
            raise NoteError(f"the signature of {verifier.name} does not verify")
        found = True
    if not found:
        raise NoteError(f"the note has no signature of {verifier.name}+{verifier.id:08x}")
    return text


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [
            self.origin,
            str(self.size),
            base64.b64encode(self.root).decode(),
            *self.extensions,
        ]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
            raise NoteError("a checkpoint is origin, size and root hash lines, each non-empty")
        origin, size, root = lines[:3]
        if not re.fullmatch(r"0|[1-9][0-9]*", size):
            raise NoteError(f"checkpoint size {size!r} is not a decimal without leading zeroes")
        raw = _b64(root, "the checkpoint's root hash")
        if len(raw) != 32:
            raise NoteError("the checkpoint's root hash is not 32 bytes")
        return cls(origin, int(size), raw, tuple(lines[3:-1]))


def open_checkpoint(note: str, verifier: Verifier, origin: str) -> Checkpoint:
    checkpoint = Checkpoint.parse(open_note(note, verifier))
    if checkpoint.origin != origin:
        raise NoteError(f"the checkpoint is of {checkpoint.origin!r}, not {origin!r}")
    return checkpoint
