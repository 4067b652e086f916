"""The paged KV cache's bookkeeping: a pool of fixed-size blocks shared by every sequence.

The cache itself is backend state (``cache_k.{il}`` / ``cache_v.{il}``, ``[n_blocks * KV_BLOCK, width]``
f16, q8_0 or q4_0: graph/ir.py); this module decides which block holds which rows. Logical row j of a sequence lives in
block ``blocks[j // KV_BLOCK]`` at row ``j % KV_BLOCK``.

- Blocks come from a free list and carry reference counts: a block may be in several sequences' tables.
- Only *full* blocks are shared, and a full block is never written again (a sequence writes only rows past
  what it has computed, which lie in its own, partial last block), so no copy-on-write is needed.
- The prefix cache: every full block of computed tokens is registered under the hash of its chain
  ``hash(parent's hash, its 32 tokens)``, so a later sequence whose tokens start the same way takes those
  blocks instead of recomputing them (a chat's next turn, ``n`` completions of one prompt, a shared system
  prompt). A registered block whose count drops to zero stays cached; it is evicted, least recently used
  first, only when the free list is empty.
- Nothing is allocated from the backend here: the pool's size is fixed when the engine starts, from a
  memory budget (:func:`pool_blocks`).
- ``contiguous``: for a backend whose kernels do not read block tables, a sequence's j-th block is always
  block j (one sequence at a time, its rows at their positions); the prefix cache works alike.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..backends.base import fmt_bytes
from ..errors import InvalidParameterError, OutOfMemoryError
from ..graph.ir import KV_BLOCK
from ..quant import kvcache as kvq


def block_bytes(hp, cache_type_k: str = "f16", cache_type_v: str = "f16") -> int:
    """Bytes of one KV block over all layers (K and V rows of ``hp``'s KV heads in the caches' types:
    quant/kvcache.py): what ``kv_memory`` budgets are counted in."""
    return hp.n_layer * KV_BLOCK * (kvq.row_bytes(cache_type_k, hp.n_head_kv * hp.head_dim)
                                    + kvq.row_bytes(cache_type_v, hp.n_head_kv * hp.head_dim_v))


def blocks_for(n_tokens: int) -> int:
    """Blocks that hold ``n_tokens`` rows."""
    return -(-n_tokens // KV_BLOCK)


def chain_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """The prefix-cache key of a full block: its tokens and, through ``parent``, every token before them.
    128-bit BLAKE2b, so a collision (which would hand a sequence another prompt's K/V) is out of reach."""
    return hashlib.blake2b(parent + np.asarray(tokens, "<i4").tobytes(), digest_size=16).digest()


@dataclass
class SeqBlocks:
    """One sequence's block table and how much of it is registered in the prefix cache."""

    blocks: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)   # chain hash of each leading full, registered block

    @property
    def n_hashed(self) -> int:
        return len(self.hashes)


class BlockPool:
    """Free list, reference counts and prefix cache of ``n_blocks`` KV blocks (see the module docstring)."""

    def __init__(self, n_blocks: int, contiguous: bool = False):
        if n_blocks < 1:
            raise ValueError(f"a block pool needs at least one block, got {n_blocks}")
        self.n_blocks = n_blocks
        self.contiguous = contiguous
        # bookkeeping grows with the blocks in use, not the pool (a pool may be sized for huge contexts)
        self._fresh = 0                                              # blocks >= this were never handed out
        self._free: list[int] = []                                   # handed out once, free again
        self._ref: dict[int, int] = {}                               # blocks in use -> reference count
        self._by_hash: dict[bytes, int] = {}
        self._hash_of: dict[int, bytes] = {}
        self._idle: OrderedDict[int, None] = OrderedDict()           # cached, unreferenced; oldest first

    # -- counts -------------------------------------------------------------------------------------------
    @property
    def n_free(self) -> int:
        """Blocks a sequence can get now: free ones and cached ones nobody references (evictable)."""
        return self.n_blocks - self._fresh + len(self._free) + len(self._idle)

    @property
    def n_used(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.n_blocks - self.n_free

    @property
    def n_cached(self) -> int:
        """Blocks registered in the prefix cache (referenced or not)."""
        return len(self._by_hash)

    def ref_count(self, block: int) -> int:
        return self._ref.get(block, 0)

    # -- allocation ---------------------------------------------------------------------------------------
    def allocate(self) -> int | None:
        """A block for new rows (reference count 1), or None when every block is referenced. Takes a free
        block, else evicts the least recently used cached one."""
        if self._free:
            b = self._free.pop()
        elif self._fresh < self.n_blocks:
            b = self._fresh
            self._fresh += 1
        elif self._idle:
            b, _ = self._idle.popitem(last=False)
            del self._by_hash[self._hash_of.pop(b)]
        else:
            return None
        self._ref[b] = 1
        return b

    def grow(self, seq: SeqBlocks, n_tokens: int) -> bool:
        """Give ``seq`` the blocks to hold ``n_tokens`` rows; False (and nothing taken) when the pool
        cannot."""
        have, want = len(seq.blocks), blocks_for(n_tokens)
        if want <= have:
            return True
        if self.contiguous:
            if want > self.n_blocks or any(b in self._ref for b in range(have, want)):
                return False
            for b in range(have, want):
                self._take(b)
                seq.blocks.append(b)
            return True
        if want - have > self.n_free:
            return False
        seq.blocks += [self.allocate() for _ in range(want - have)]    # type: ignore[misc]  (n_free checked)
        return True

    def _take(self, b: int) -> None:
        """Block ``b`` (free or idle) for new rows: out of the free list or the prefix cache."""
        if b in self._idle:
            del self._idle[b]
            del self._by_hash[self._hash_of.pop(b)]
        elif b >= self._fresh:
            self._free += range(self._fresh, b)
            self._fresh = b + 1
        else:
            self._free.remove(b)
        self._ref[b] = 1

    def shrink(self, seq: SeqBlocks, n_tokens: int) -> None:
        """Give back ``seq``'s blocks past those holding ``n_tokens`` rows (taken ahead for steps that did
        not run); they hold no registered rows."""
        keep = max(blocks_for(n_tokens), seq.n_hashed)
        tail = seq.blocks[keep:]
        del seq.blocks[keep:]
        self.release(SeqBlocks(tail))

    def release(self, seq: SeqBlocks) -> None:
        """Drop ``seq``'s references (its table empties); cached blocks stay cached, the rest go free."""
        for b in reversed(seq.blocks):   # a chain's tail first: evicted before the blocks it hangs from
            self._ref[b] -= 1
            if self._ref[b] == 0:
                del self._ref[b]
                if b in self._hash_of:
                    self._idle[b] = None
                else:
                    self._free.append(b)
        seq.blocks.clear()
        seq.hashes.clear()

    # -- prefix cache -------------------------------------------------------------------------------------
    def match(self, seq: SeqBlocks, tokens: Sequence[int], limit: int) -> int:
        """Take the cached blocks that hold a prefix of ``tokens`` (at most ``limit`` tokens of it) into the
        empty ``seq``; returns how many tokens they hold (a multiple of KV_BLOCK)."""
        assert not seq.blocks
        parent = b""
        for i in range(min(limit, len(tokens)) // KV_BLOCK):
            h = chain_hash(parent, tokens[i * KV_BLOCK:(i + 1) * KV_BLOCK])
            b = self._by_hash.get(h)
            if b is None:
                break
            if b not in self._ref:
                del self._idle[b]
            self._ref[b] = self._ref.get(b, 0) + 1
            seq.blocks.append(b)
            seq.hashes.append(h)
            parent = h
        return len(seq.blocks) * KV_BLOCK

    def register(self, seq: SeqBlocks, tokens: Sequence[int], n_computed: int) -> None:
        """Register ``seq``'s full blocks whose rows are all computed (``tokens[:n_computed]``), so later
        sequences can share them. A block whose chain another block already holds stays private."""
        parent = seq.hashes[-1] if seq.hashes else b""
        for i in range(seq.n_hashed, min(n_computed // KV_BLOCK, len(seq.blocks))):
            h = chain_hash(parent, tokens[i * KV_BLOCK:(i + 1) * KV_BLOCK])
            b = seq.blocks[i]
            if h not in self._by_hash and b not in self._hash_of:
                self._by_hash[h] = b
                self._hash_of[b] = h
            seq.hashes.append(h)
            parent = h

    def clear_cache(self) -> None:
        """Forget every idle cached block (they go back to the free list); referenced ones stay."""
        for b in list(self._idle):
            del self._by_hash[self._hash_of.pop(b)]
            self._free.append(b)
        self._idle.clear()


# -- sizing ---------------------------------------------------------------------------------------------------
def pool_blocks(per_block: int, n_ctx: int, max_seqs: int, kv_memory: int | None, default_budget: int | None,
                max_blocks: int | None = None, max_blocks_why: str = "") -> int:
    """Blocks in the pool: room for ``max_seqs`` full contexts, within ``kv_memory`` bytes when given, else
    within ``default_budget`` (None: no bound) but never less than one full context; and at most
    ``max_blocks`` (a backend's bound, ``max_blocks_why`` saying which). OutOfMemoryError, before anything
    is allocated, when not even one sequence of ``n_ctx`` tokens fits."""
    if kv_memory is not None and (isinstance(kv_memory, bool) or not isinstance(kv_memory, int) or kv_memory < 1):
        raise InvalidParameterError(f"kv_memory must be a positive number of bytes, got {kv_memory!r}")
    one = blocks_for(n_ctx)
    n, why = max_seqs * one, ""
    if kv_memory is not None:
        n, why = min(n, kv_memory // per_block), f"kv_memory={fmt_bytes(kv_memory)}"
    elif default_budget is not None:
        n = max(one, min(n, default_budget // per_block))
    if max_blocks is not None and max_blocks < n:     # never below one context: the backend's own guard
        n, why = max(max_blocks, one), max_blocks_why  # names a buffer too large for one sequence
    if n < one:
        raise OutOfMemoryError(
            f"the KV cache needs {fmt_bytes(one * per_block)} for one sequence of n_ctx={n_ctx} tokens "
            f"({fmt_bytes(per_block // KV_BLOCK)} per token) but {why} leaves room for {n * KV_BLOCK} tokens; "
            f"use a smaller n_ctx or a larger kv_memory")
    return n
