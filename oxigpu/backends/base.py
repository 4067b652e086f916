"""What every backend offers (:class:`Backend`) and what one step hands it (:class:`Step`).

A backend executes compiled Plans (``graph/plan.py``): ``load`` allocates a plan's weights, states and
activations once, ``run`` executes one step of it. Optional capabilities are declared, never probed:
``Backend.resident`` is the GPU-resident decode loop (:class:`ResidentDecode`) or None. The numpy backend
is the reference (its ops in ``numpy_ops`` define every op's semantics); the wgpu backend runs the same
plans on a GPU.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import ContextLengthError, InvalidParameterError
from ..graph.ir import KV_BLOCK, Node
from ..graph.plan import Plan

Trace = Callable[[Node, tuple[np.ndarray, ...]], None]
"""``trace(node, outputs)``: called after every node of a traced step with views the next step overwrites
(copy to keep); a node without outputs reports the states it wrote. The profiling hook: wall clock per
node on the host, every output read back on a GPU (``oxigpu diff``)."""


@dataclass(frozen=True)
class Step:
    """The rows of one step: row ``t`` is token ``tokens[t]`` at position ``positions[t]`` of sequence slot
    ``row_seq[t]``; slot ``s`` reads and writes its KV rows through ``block_table[s]`` and returns the logits
    of row ``out_rows[s]`` (its last row in the step). Rows of a slot are contiguous and in position order.

    All arrays are int32 and hold only valid rows and slots (``n_tokens``, ``n_seqs``); the backend pads
    them to the plan's shapes (:meth:`padded_inputs`, which also checks every index a kernel will use).
    """

    tokens: np.ndarray
    positions: np.ndarray
    row_seq: np.ndarray
    block_table: np.ndarray
    out_rows: np.ndarray

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_seqs(self) -> int:
        return len(self.out_rows)

    @classmethod
    def single(cls, tokens: Sequence[int] | np.ndarray, pos: int, blocks: Sequence[int] | None = None) -> Step:
        """One sequence's ``tokens`` at positions ``pos, pos + 1, ...``, its KV rows in ``blocks`` (None: the
        identity table, blocks 0, 1, 2, ... as a contiguous cache)."""
        ids = np.asarray(tokens, np.int32).reshape(-1)
        n = len(ids)
        table = np.asarray([] if blocks is None else blocks, np.int32).reshape(1, -1)
        return cls(ids, np.arange(pos, pos + n, dtype=np.int32), np.zeros(n, np.int32), table,
                   np.asarray([n - 1], np.int32))

    @classmethod
    def batch(cls, seqs: Sequence[tuple[Sequence[int], int, Sequence[int]]]) -> Step:
        """Several sequences, slot i = ``seqs[i]`` = (its tokens in this step, the position of the first,
        its block table)."""
        tokens = [np.asarray(t, np.int32).reshape(-1) for t, _, _ in seqs]
        width = max((len(b) for _, _, b in seqs), default=0)
        table = np.zeros((len(seqs), width), np.int32)
        for i, (_, _, b) in enumerate(seqs):
            table[i, :len(b)] = b
        ends = np.cumsum([len(t) for t in tokens])
        return cls(np.concatenate(tokens), np.concatenate([np.arange(p, p + len(t), dtype=np.int32)
                                                           for t, (_, p, _) in zip(tokens, seqs)]),
                   np.repeat(np.arange(len(seqs), dtype=np.int32), [len(t) for t in tokens]), table,
                   (ends - 1).astype(np.int32))

    def padded_inputs(self, plan: Plan, n_ctx: int) -> dict[str, np.ndarray]:
        """Check the step against ``plan`` and return each plan input padded to its full shape (zeros past
        the valid rows and slots). Every backend's ``run`` starts here, so both refuse the same bad steps
        with the same messages, and no kernel is handed an index outside its buffers."""
        n, S, T = self.n_tokens, self.n_seqs, plan.T
        n_slots = plan.graph.S
        if not 1 <= n <= T:
            raise InvalidParameterError(f"n_tokens must be in 1..{T}, got {n}")
        if not 1 <= S <= n_slots:
            raise InvalidParameterError(f"n_seqs must be in 1..{n_slots}, got {S}")
        if S == 1 and (n == 1 or not plan.graph.decode):
            fast = self._one_slot_inputs(plan, n_ctx)
            if fast is not None:
                return fast
        table = self._checked_table(plan, n_ctx)
        given = {"tokens": self.tokens, "positions": self.positions, "row_seq": self.row_seq,
                 "block_table": table, "out_rows": self.out_rows}
        padded = {}
        for name, v in plan.inputs.items():
            if name not in given:
                raise InvalidParameterError(f"the plan reads an input {name!r} no step provides")
            dtype = np.int32 if v.dtype == "i32" else np.float32
            src = np.asarray(given[name])
            if src.shape == v.shape and src.dtype == dtype and name not in HOST_ONLY_INPUTS:
                padded[name] = src          # full already: no copy
                continue
            host = np.zeros(v.shape, dtype)
            host[tuple(slice(0, k) for k in src.shape)] = src
            padded[name] = host
        return padded

    def _one_slot_inputs(self, plan: Plan, n_ctx: int) -> dict[str, np.ndarray] | None:
        """:meth:`padded_inputs` of a step of one slot as Step.single makes it (one run of rows at consecutive
        positions, its logits row the last), or None for the general checks to judge. A prompt chunk's
        first submit waits for this, with the CPU's caches cold after the last chunk's wait: so few numpy
        calls, the positions and row_seq compared as bytes (docs/perf-log.md, fifth session)."""
        pos, seq, out, bt, tok = self.positions, self.row_seq, self.out_rows, self.block_table, self.tokens
        n = len(tok)
        for a in (pos, seq, out, bt, tok):
            if type(a) is not np.ndarray or a.dtype != np.int32:
                return None
        if pos.shape != (n,) or seq.shape != (n,) or out.shape != (1,) or int(out[0]) != n - 1 or bt.ndim != 2:
            return None
        p0 = int(pos[0])
        if p0 < 0 or p0 + n > n_ctx or pos.tobytes() != _arange_bytes(n_ctx)[4 * p0:4 * (p0 + n)] \
                or seq.tobytes() != bytes(4 * n):
            return None
        padded = {}
        for name, v in plan.inputs.items():
            if v.dtype != "i32":
                return None
            if name == "tokens" or name == "positions":
                src = tok if name == "tokens" else pos
                if v.shape == (n,):
                    padded[name] = src             # full already: no copy
                    continue
                host = np.zeros(v.shape, np.int32)
                host[:n] = src
            elif name == "row_seq":
                host = np.zeros(v.shape, np.int32)
            elif name == "out_rows":
                host = np.zeros(v.shape, np.int32)
                host[0] = n - 1
            elif name == "block_table":
                mb, w, k = v.shape[1], bt.shape[1], (p0 + n - 1) // KV_BLOCK + 1   # k: blocks the rows reach
                if mb * KV_BLOCK < n_ctx or bt.shape[0] != 1 or w > mb or k > (w or mb):
                    return None
                if w:                              # used entries in 0..kv_blocks-1 (negatives wrap high)
                    if int(np.maximum.reduce(bt[0, :k].view(np.uint32))) >= plan.kv_blocks:
                        return None
                elif k > plan.kv_blocks:           # the identity table
                    return None
                host = np.zeros(v.shape, np.int32)
                host[0, :w or mb] = bt[0] if w else np.arange(mb, dtype=np.int32)
            else:
                return None
            padded[name] = host
        return padded

    def _checked_table(self, plan: Plan, n_ctx: int) -> np.ndarray:
        """The general checks of the rows against the slots; the checked block table."""
        n, S = self.n_tokens, self.n_seqs
        pos, seq, out = (np.asarray(a, np.int64) for a in (self.positions, self.row_seq, self.out_rows))
        if len(pos) != n or len(seq) != n:
            raise InvalidParameterError(f"tokens, positions and row_seq differ in length ({n}, {len(pos)}, "
                                        f"{len(seq)})")
        if pos.min() < 0 or pos.max() >= n_ctx:
            raise ContextLengthError(f"positions {pos.min()}..{pos.max()} exceed the context of {n_ctx}")
        if seq.min() < 0 or seq.max() >= S or np.count_nonzero(np.bincount(seq, minlength=S)) != S:
            raise InvalidParameterError(f"row_seq must name every slot 0..{S - 1} and no other")
        same = seq[1:] == seq[:-1]
        if (np.count_nonzero(~same) != S - 1) or (pos[1:][same] != pos[:-1][same] + 1).any():
            raise InvalidParameterError("a sequence's rows must be contiguous and at consecutive positions")
        last = np.append(np.flatnonzero(~same), n - 1)           # each run's last row, in row order
        if len(out) != S or not np.array_equal(np.sort(out), last) or (seq[out] != np.arange(S)).any():
            raise InvalidParameterError("out_rows[s] must be the last row of slot s")
        if plan.graph.decode and (seq != np.arange(n)).any():
            raise InvalidParameterError("a decode plan runs one row per sequence, row t in slot t")
        return self._table(plan, n_ctx, pos[last], seq[last])

    def _table(self, plan: Plan, n_ctx: int, pos: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """The block table, checked: every block a row writes or a query reads lies in the cache (``pos``,
        ``seq``: each slot's last row, its furthest position)."""
        bt = plan.inputs.get("block_table")
        if bt is None:
            return np.zeros((self.n_seqs, 0), np.int32)
        mb = bt.shape[1]
        if mb * KV_BLOCK < n_ctx:
            raise InvalidParameterError(f"the plan's block tables hold {mb * KV_BLOCK} tokens, the context "
                                        f"{n_ctx}")
        table = np.asarray(self.block_table, np.int64)
        if table.shape[1] == 0:                                  # the identity table (Step.single)
            table = np.broadcast_to(np.arange(mb), (self.n_seqs, mb))
        if table.ndim != 2 or table.shape[0] != self.n_seqs or table.shape[1] > mb:
            raise InvalidParameterError(f"block_table is {table.shape}; expected ({self.n_seqs}, <= {mb})")
        n_blocks = plan.kv_blocks
        need = np.zeros(self.n_seqs, np.int64)
        need[seq] = pos // KV_BLOCK + 1                          # blocks up to each slot's last position
        used = np.arange(table.shape[1])[None, :] < need[:, None]
        if need.max() > table.shape[1] or ((table < 0) | (table >= n_blocks))[used].any():
            raise InvalidParameterError(f"block_table must give every position a block in 0..{n_blocks - 1}")
        return table.astype(np.int32)


@functools.lru_cache(maxsize=8)
def _arange_bytes(n: int) -> bytes:
    """0, 1, ..., n - 1 as int32 bytes: one slot's positions are consecutive iff they equal a slice of it."""
    return np.arange(n, dtype=np.int32).tobytes()


HOST_ONLY_INPUTS = ("row_seq", "block_table", "out_rows")
"""Step inputs no kernel writes. :meth:`Step.padded_inputs` always pads them into arrays of their own: a
backend may keep one to skip writing the same values again, so it must not be the caller's, which may
change. (The others may be the caller's own array when it is full already.)"""


class ResidentDecode(Protocol):
    """A backend that decodes GPU-resident: each step's sampled id feeds the next step's embedding on the
    device, batches of steps are queued without a host round trip, and the host reads the ids a batch at a
    time. Also what device profiling needs: the device and each node's dispatches."""

    dev: Any
    """The device (``backends/wgpu/device.Device``): timing passes, submitting dispatches."""
    resident_batch: int
    """Steps per resident batch."""

    def decode_stream(self, plan: Plan, context: Sequence[int], sampling: Any, n_steps: int,
                      block_table: Sequence[int] | None = None) -> Iterator[tuple[list[int], np.ndarray | None]]:
        """Up to ``n_steps`` decode steps after ``context`` (the cache holds ``context[:-1]`` in the blocks of
        ``block_table``, which cover every position the steps write; None: blocks 0, 1, 2, ...), drawing with
        ``sampling`` (the runtime's ``SlotBatch``: settings and state of the sequence); yields the drawn ids a
        batch at a time, with their logprob rows when asked."""
        ...

    def decode_batch(self, plan: Plan, contexts: Sequence[Sequence[int]], sampling: Any, n_steps: int,
                     block_tables: Sequence[Sequence[int]], masks: Callable[[], np.ndarray | None] | None = None,
                     whole: bool = False) -> Iterator[tuple[list[list[int]], np.ndarray | None]]:
        """:meth:`decode_stream` for several sequences at once, one row each on a decode plan of T >= their
        number of rows (``sampling`` a SlotBatch of T slots): ids [step][sequence] a batch at a time, logprob
        rows [sequence, step, ...] when asked. The iterator also has ``stop()``: queue no more steps, but
        still yield those already queued. ``masks``: constrained slots, each step's masks asked for (uint32
        [rows, W], or [k, rows, W] for a run of k steps whose draws are all known to the host: a constraint's
        forced tokens under one-token masks, then the draw after them; read back at once) while its forward
        runs on the device. ``whole``: every step in one batch, read back once (a speculative round's drafts,
        which nobody streams)."""
        ...

    def run_sampled(self, plan: Plan, step: Any, sampling: Any, contexts: Sequence[Sequence[int] | None]
                    ) -> tuple[list[int], np.ndarray | None]:
        """A host step of ``plan`` followed by the GPU sampler on its logits rows (``sampling``: a SlotBatch of
        its S rows; ``contexts[s]``: sequence s's tokens, None where it draws nothing): the drawn ids and
        logprob rows when asked, never the logits."""
        ...

    def prepare_sampled(self, plan: Plan, sampling: Any) -> None:
        """Build :meth:`run_sampled`'s sampler for ``plan`` and this kind of settings now, not on a request's
        time (a server's warm-up; the buffers it holds are built once per plan and kind)."""
        ...

    def resident_step(self, plan: Plan, sampling: Any, pos: int | None = None
                      ) -> list[tuple[Node | None, list[Any]]]:
        """One resident step as encoded: each node's dispatches, then (None, the sampler's)."""
        ...

    def node_dispatches(self, plan: Plan) -> list[tuple[Node, list[Any]]]:
        """Each node of ``plan`` (loaded) with the dispatches a host step submits for it."""
        ...


class Backend(Protocol):
    """A backend: ``Backend(model: GGUFFile, n_ctx)`` then the members below."""

    name: str
    n_ctx: int
    paged: bool
    """Whether the kernels read K/V through block tables (many sequences per step); False: one sequence per
    step whose cache rows are its positions (the runtime then hands out blocks 0, 1, 2, ... in order)."""

    @property
    def prefill_chunk(self) -> int:
        """Default prompt tokens per prefill step on this backend's hardware."""
        ...

    @property
    def resident(self) -> ResidentDecode | None:
        """The GPU-resident decode loop, or None: the runtime decodes step by step on the host."""
        ...

    def load(self, plan: Plan) -> None:
        """Allocate ``plan``'s weights (shared by all plans), states and activations; idempotent."""
        ...

    def run(self, plan: Plan, step: Step, trace: Trace | None = None, read: bool = True,
            meanwhile: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        """One step of ``plan``: write the KV rows of ``step``'s tokens, return the outputs ({name: array};
        per-slot outputs may hold only the step's ``n_seqs`` valid rows). ``read`` False (a prompt chunk
        whose logits nobody needs): the outputs may be left unread ({}), so a device's queue takes the
        next chunk while this one runs; the next read waits for both. ``meanwhile()`` is called once the
        step is submitted, before its outputs are read: host work that overlaps the device's."""
        ...

    def reset(self) -> None:
        """Zero every KV cache."""
        ...

    def memory_bytes(self) -> int:
        """Bytes this backend holds (weights, states, activations)."""
        ...

    def weight_bytes(self, plan: Plan) -> int:
        """Bytes of ``plan``'s weights as stored: what a step reads from weights, for bandwidth figures."""
        ...

    def kv_budget(self) -> int | None:
        """Bytes the KV-cache pool takes by default (``kv_memory=`` overrides; None: no bound)."""
        ...

    def max_cache_rows(self, row_bytes: int) -> int | None:
        """The most rows one layer's K (or V) cache of ``row_bytes`` per row may have here (a buffer or
        binding limit), None when unbounded."""
        ...


def check_context(plan: Plan, n_ctx: int) -> None:
    """InvalidParameterError when ``plan``'s block tables cannot hold ``n_ctx`` tokens, or its caches
    differ in size (a plan built for another context or pool)."""
    bt = plan.inputs.get("block_table")
    if bt is not None and bt.shape[1] != -(-n_ctx // KV_BLOCK):
        raise InvalidParameterError(f"plan was built for n_ctx={bt.shape[1] * KV_BLOCK}, backend has {n_ctx}")
    if len({s.shape[0] for s in plan.states}) > 1:
        raise InvalidParameterError("the plan's KV caches differ in rows")


# -- memory guards and budgets -----------------------------------------------------------------------------------------
def mem_available() -> int | None:
    """Host memory available for new allocations (Linux ``MemAvailable``), None where unknown. Backends call
    it as ``base.mem_available()`` so tests can pretend memory is short in one place."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def fmt_bytes(n: int) -> str:
    """A byte count for messages: "1.50 GiB", "12.3 MiB", "4.0 KiB", "512 B"."""
    for unit, scale, digits in (("GiB", 2**30, 2), ("MiB", 2**20, 1), ("KiB", 2**10, 1)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n} B"


DEFAULT_GPU_KV_BYTES = 8 << 30
"""The default KV budget on a hardware GPU, whose free memory WebGPU does not report: 8 GiB (64k tokens of the
f16 cache of a model with 32 layers of 8 KV heads of 128 dims). ``kv_memory=`` sets another."""

HOST_KV_FRACTION = 0.25
"""The default KV budget where the cache lives in host memory (numpy, software adapters): this share of
MemAvailable."""


def host_kv_budget() -> int | None:
    avail = mem_available()
    return None if avail is None else int(avail * HOST_KV_FRACTION)
