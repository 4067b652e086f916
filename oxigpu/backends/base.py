"""What every backend offers (:class:`Backend`) and what one step hands it (:class:`Step`).

A backend executes compiled Plans (``graph/plan.py``): ``load`` allocates a plan's weights, states and
activations once, ``run`` executes one step of it. Optional capabilities are declared, never probed:
``Backend.resident`` is the GPU-resident decode loop (:class:`ResidentDecode`) or None. The numpy backend
is the reference (its ops in ``numpy_ops`` define every op's semantics); the wgpu backend runs the same
plans on a GPU.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import ContextLengthError, InvalidParameterError
from ..graph.ir import Node
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
    them to the plan's shapes.
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
    def single(cls, tokens: Sequence[int] | np.ndarray, pos: int, block_table: Sequence[int] = ()) -> Step:
        """One sequence's ``tokens`` at positions ``pos, pos + 1, ...`` (its blocks: ``block_table``)."""
        ids = np.asarray(tokens, np.int32).reshape(-1)
        n = len(ids)
        return cls(ids, np.arange(pos, pos + n, dtype=np.int32), np.zeros(n, np.int32),
                   np.asarray(block_table, np.int32).reshape(1, -1), np.asarray([n - 1], np.int32))

    @property
    def pos(self) -> int:
        """The first position of a one-sequence step (the step parameter of plans without a block table)."""
        return int(self.positions[0]) if self.n_tokens else 0

    def check_single(self) -> None:
        """InvalidParameterError unless this is one sequence at consecutive positions (what a plan without
        a block table runs)."""
        n = self.n_tokens
        if self.n_seqs != 1 or (n and (self.row_seq.any() or (np.diff(self.positions) != 1).any())):
            raise InvalidParameterError("this plan runs one sequence at consecutive positions per step")

    def padded_inputs(self, plan: Plan, n_ctx: int) -> dict[str, np.ndarray]:
        """Check the step against ``plan`` and return each plan input padded to its full shape (zeros past
        the valid rows). Every backend's ``run`` starts here, so both refuse the same bad steps with the
        same messages."""
        n_tokens = self.n_tokens
        if not 1 <= n_tokens <= plan.T:
            raise InvalidParameterError(f"n_tokens must be in 1..{plan.T}, got {n_tokens}")
        self.check_single()
        pos = self.pos
        if pos < 0 or pos + n_tokens > n_ctx:
            raise ContextLengthError(f"positions {pos}..{pos + n_tokens - 1} exceed the context of {n_ctx}")
        given = {"tokens": self.tokens}
        padded = {}
        for name, v in plan.inputs.items():
            if name not in given:
                raise InvalidParameterError(f"missing input {name!r}")
            host = np.zeros(v.shape, np.int32 if v.dtype == "i32" else np.float32)
            host[:n_tokens] = given[name]
            padded[name] = host
        return padded


class ResidentDecode(Protocol):
    """A backend that decodes GPU-resident: each step's sampled id feeds the next step's embedding on the
    device, batches of steps are queued without a host round trip, and the host reads the ids a batch at a
    time. Also what device profiling needs: the device and each node's dispatches."""

    dev: Any
    """The device (``backends/wgpu/device.Device``): timing passes, submitting dispatches."""
    resident_batch: int
    """Steps per resident batch."""

    def decode_stream(self, plan: Plan, context: Sequence[int], cfg: Any, counter: int,
                      n_steps: int) -> Iterator[list[int]]:
        """Up to ``n_steps`` decode steps after ``context`` (the cache holds ``context[:-1]``), sampling
        with ``cfg`` at RNG counters ``counter, counter + 1, ...``; yields the drawn ids a batch at a time."""
        ...

    def resident_step(self, plan: Plan, n_bias: int = 0, greedy: bool = False, pos: int | None = None
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

    def run(self, plan: Plan, step: Step, trace: Trace | None = None) -> dict[str, np.ndarray]:
        """One step of ``plan``: write the KV rows of ``step``'s tokens, return the outputs ({name: array})."""
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


# -- memory guards -------------------------------------------------------------------------------------------
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
