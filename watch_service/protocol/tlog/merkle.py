"""RFC 9162 section 2.1 Merkle trees over SHA-256: the leaf and node hashes, the tree hash of
any range, inclusion and consistency proofs and their verification (sections 2.1.3 and 2.1.4,
the algorithms as the RFC states them).

Hashes of complete subtrees come from a :class:`HashSource`: ``stored(level, index)`` is the
hash of leaves ``[index * 2**level, (index + 1) * 2**level)``. :class:`LeafHashes` computes
them from a list of leaf hashes; ``tiles.TileHashes`` reads them out of tiles, so a proof over
a 5 M-leaf tree touches a few tiles, never the history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

from watch_service.protocol.errors import AuditsyncError

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(AuditsyncError):
    """A proof, tree size or index that does not verify; the message says which check failed."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


class HashSource(Protocol):
    def stored(self, level: int, index: int) -> bytes:
        """The hash of the complete subtree of ``2**level`` leaves numbered ``index``."""
        ...


def perfect_root(hashes: Sequence[bytes]) -> bytes:
    """The root over a power-of-two count of same-height subtree hashes."""
    level = list(hashes)
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


class LeafHashes:
    """Complete-subtree hashes computed from every leaf hash (for tests and small trees)."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.levels: list[list[bytes]] = [list(leaves)]
        while len(self.levels[-1]) > 1:
            below = self.levels[-1]
            self.levels.append(
                [node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
            )

    def stored(self, level: int, index: int) -> bytes:
        return self.levels[level][index]


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def subtree_hash(src: HashSource, lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) for ``lo`` aligned as RFC 9162's recursion leaves it."""
    n = hi - lo
    if n <= 0:
        raise ProofError(f"empty range {lo}..{hi}")
    if n & (n - 1) == 0 and lo % n == 0:
        level = n.bit_length() - 1
        return src.stored(level, lo >> level)
    k = _split(n)
    return node_hash(subtree_hash(src, lo, lo + k), subtree_hash(src, lo + k, hi))


def tree_hash(src: HashSource, size: int) -> bytes:
    return EMPTY_ROOT if size == 0 else subtree_hash(src, 0, size)


def root_of(leaves: Sequence[bytes]) -> bytes:
    """MTH over a list of leaf hashes."""
    return tree_hash(LeafHashes(leaves), len(leaves)) if leaves else EMPTY_ROOT


def inclusion_proof(src: HashSource, index: int, size: int) -> list[bytes]:
    """PATH(index, D[0:size]), RFC 9162 section 2.1.3.1, leaf sibling first."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not in a tree of size {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append(subtree_hash(src, lo + k, hi))
            hi = lo + k
        else:
            path.append(subtree_hash(src, lo, lo + k))
            lo = lo + k
    path.reverse()
    return path


def consistency_proof(src: HashSource, old: int, new: int) -> list[bytes]:
    """PROOF(old, D[0:new]), RFC 9162 section 2.1.4.1."""
    if not 0 <= old <= new:
        raise ProofError(f"no consistency proof from size {old} to size {new}")
    if old == 0 or old == new:
        return []
    proof: list[bytes] = []
    lo, hi, m, complete = 0, new, old, True
    while m != hi - lo:
        k = _split(hi - lo)
        if m <= k:
            proof.append(subtree_hash(src, lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree_hash(src, lo, lo + k))
            lo, m, complete = lo + k, m - k, False
    if not complete:
        proof.append(subtree_hash(src, lo, hi))
    proof.reverse()
    return proof


def root_from_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes:
    """The root the inclusion ``path`` leads to, RFC 9162 section 2.1.3.2 steps 1 to 4."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not in a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            raise ProofError(f"inclusion proof for index {index} is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError(f"inclusion proof for index {index} is too short")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes
) -> None:
    if root_from_inclusion(index, size, leaf, path) != root:
        raise ProofError(
            f"inclusion proof for index {index} does not lead to the root of size {size}"
        )


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 section 2.1.4.2; an equal size needs an empty proof and equal roots."""
    if not 0 <= old <= new:
        raise ProofError(f"tree size {new} is smaller than the earlier {old}")
    if old == new or old == 0:
        if proof:
            raise ProofError(f"the consistency proof from size {old} to {new} must be empty")
        if old == new and old_root != new_root:
            raise ProofError(f"two different roots for tree size {old}")
        return
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    if not path:
        raise ProofError(f"empty consistency proof from size {old} to {new}")
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"consistency proof from size {old} to {new} is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ProofError(f"the tree of size {new} does not extend the tree of size {old}")
