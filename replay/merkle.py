"""RFC 6962 Merkle trees over the journal's leaves (leaf = SHA-256(0x00 || entry)).

node = SHA-256(0x01 || left || right); the tree of n leaves splits at the largest power
of two below n. Inclusion proofs show an event is in a tree head; consistency proofs
show a later tree head only appended to an earlier one. Verification follows RFC 9162
§2.1.3.2 and §2.1.4.2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from itertools import islice

EMPTY_ROOT = hashlib.sha256(b"").digest()
HASH_SIZE = 32
MAX_SIZE = 2**64 - 1  # tree sizes and indexes are uint64 in every format we speak


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SIZE


_sha256 = hashlib.sha256


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


class Frontier:
    """The running tree: perfect-subtree roots, largest first; root at any size, O(log n).

    The roots are those of the set bits of ``size``, so only they are kept: appending a leaf
    merges it with one root per trailing one bit of the old size.
    """

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[bytes] = []  # one root per set bit of ``size``, largest first

    @classmethod
    def restore(cls, size: int, nodes: Sequence[bytes]) -> Frontier:
        """The running tree after ``size`` leaves, from its perfect-subtree roots (largest
        first, one per set bit of ``size``): what ``nodes()`` returns."""
        if size < 0 or size.bit_count() != len(nodes) or not all(_is_hash(n) for n in nodes):
            raise ValueError("one 32-byte node per set bit of the size")
        frontier = cls()
        frontier.size = size
        frontier._stack = list(nodes)
        return frontier

    def nodes(self) -> list[bytes]:
        return list(self._stack)

    def append(self, leaf: bytes) -> None:
        stack, node, merges = self._stack, leaf, self.size
        while merges & 1:
            node = _sha256(b"\x01" + stack.pop() + node).digest()
            merges >>= 1
        stack.append(node)
        self.size += 1

    def extend(self, leaves: Sequence[bytes]) -> None:
        """`append` each of ``leaves``, a level at a time: the same nodes, hashed pairwise in
        one comprehension per level instead of a method call and a loop per leaf."""
        stack, start, level = self._stack, self.size, list(leaves)
        smaller: list[bytes] = []  # roots left over at each level, smallest first
        while level:
            if start & 1:  # the stack's smallest root is this level's left neighbour
                level.insert(0, stack.pop())
                start -= 1
            if len(level) & 1:
                smaller.append(level.pop())
            level = [
                _sha256(b"\x01" + a + b).digest()
                for a, b in zip(level[::2], level[1::2], strict=True)
            ]
            start >>= 1
        stack.extend(reversed(smaller))
        self.size += len(leaves)

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        acc = self._stack[-1]
        for node in reversed(self._stack[:-1]):
            acc = node_hash(node, acc)
        return acc


def root_of(leaves: Iterable[bytes]) -> bytes:
    """The root of ``leaves``, folded a batch at a time (memory stays bounded for an
    iterator of any length)."""
    frontier = Frontier()
    if isinstance(leaves, Sequence):
        frontier.extend(leaves)
        return frontier.root()
    remaining = iter(leaves)
    while batch := list(islice(remaining, 4096)):
        frontier.extend(batch)
    return frontier.root()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 PATH(m, D[n]): the audit path of leaf ``index``."""
    n = len(leaves)
    if not 0 <= index < n:
        raise ValueError("index outside the tree")
    if n == 1:
        return []
    k = _split(n)
    if index < k:
        return [*inclusion_proof(index, leaves[:k]), root_of(leaves[k:])]
    return [*inclusion_proof(index - k, leaves[k:]), root_of(leaves[:k])]


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2; refuses hashes that are not 32 bytes and indexes outside the tree."""
    if not (_is_size(index) and _is_size(size) and index < size):
        return False
    if not (_is_hash(leaf) and _is_hash(root) and all(_is_hash(p) for p in proof)):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 PROOF(m, D[n]): the tree of ``leaves`` extends its first ``old_size``."""
    n = len(leaves)
    if not 0 < old_size <= n:
        raise ValueError("old size must be within 1..n")
    return _subproof(old_size, leaves, True)


def _subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root_of(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], complete), root_of(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), root_of(leaves[:k])]


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2; refuses hashes that are not 32 bytes and sizes out of order.

    A proof from the empty tree proves nothing and is refused (as transparency-dev/merkle).
    """
    if not (_is_size(old_size) and _is_size(new_size) and 0 < old_size <= new_size):
        return False
    if not (_is_hash(old_root) and _is_hash(new_root) and all(_is_hash(p) for p in proof)):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the path
        path = [old_root, *path]
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


#: The hash of the leaves ``[start, end)`` of a tree, however it is kept.
SubtreeHash = Callable[[int, int], bytes]


def path_in(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """RFC 6962 PATH(index, D[size]) over a tree known only by its subtree hashes."""
    if not (_is_size(index) and _is_size(size) and index < size):
        raise ValueError("index outside the tree")
    proof: list[bytes] = []
    start, end, m = 0, size, index
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            proof.append(subtree(start + k, end))
            end = start + k
        else:
            proof.append(subtree(start, start + k))
            start, m = start + k, m - k
    proof.reverse()  # from the leaf's sibling upward
    return proof


def consistency_in(old_size: int, new_size: int, subtree: SubtreeHash) -> list[bytes]:
    """RFC 6962 PROOF(old_size, D[new_size]) over a tree known by its subtree hashes."""
    if not (_is_size(old_size) and _is_size(new_size) and 0 < old_size <= new_size):
        raise ValueError("old size must be within 1..new size")
    proof: list[bytes] = []
    start, end, m, complete = 0, new_size, old_size, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append(subtree(start + k, end))
            end = start + k
        else:
            proof.append(subtree(start, start + k))
            start, m, complete = start + k, m - k, False
    if not complete:
        proof.append(subtree(start, end))
    proof.reverse()
    return proof
