"""Compile a Graph into a Plan: execution order, checks, and one activation arena.

Every temp value gets a byte offset into a single arena (256-byte aligned, the strictest storage-buffer
offset alignment WebGPU allows), so a backend allocates activations once per plan. Two values share
bytes only when their lifetimes do not overlap; a value lives from the node that writes it through the
last node that reads it (graph outputs live to the end of the step). A node's outputs never alias its
inputs, so kernels need not be written to work in place.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

from .ir import KV_BLOCK, OPS, Graph, Node, Value, slots_of, written_states

ALIGN = 256


_KEYS = itertools.count()


@dataclass(eq=False)
class Plan:
    """A compiled graph. ``key`` is unique in the process (never reused, unlike ``id()``): backends key what
    they load for a plan by it."""

    graph: Graph
    nodes: list[Node]                 # execution order
    offsets: dict[Value, int]         # arena byte offset of every temp/output value
    arena_size: int                   # bytes
    weights: list[Value]
    states: list[Value]
    live: dict[Value, tuple[int, int]]  # [first, last] node index during which each arena value is live
    key: int = field(default_factory=lambda: next(_KEYS))

    @property
    def T(self) -> int:
        """Rows per step (tokens in the chunk; padded rows are masked by ``n_tokens``)."""
        return self.graph.T

    @property
    def inputs(self) -> dict[str, Value]:
        return self.graph.inputs

    @property
    def outputs(self) -> dict[str, Value]:
        return self.graph.outputs

    @functools.cached_property
    def kv_blocks(self) -> int:
        """KV blocks its caches hold (the smallest state's rows / KV_BLOCK; 0 without states): the bound of
        every block-table entry, checked each step."""
        return min(s.shape[0] for s in self.states) // KV_BLOCK if self.states else 0

    def __repr__(self) -> str:
        return (f"Plan(T={self.T}, {len(self.nodes)} nodes, {len(self.weights)} weights, "
                f"{len(self.states)} states, arena {self.arena_size / 2**20:.2f} MiB)")


def compile(graph: Graph) -> Plan:
    """Check the graph's dataflow, compute value lifetimes and pack them into one arena."""
    nodes = list(graph.nodes)
    _check_dataflow(graph, nodes)
    end = len(nodes)
    live: dict[Value, tuple[int, int]] = {}
    for i, node in enumerate(nodes):
        for v in node.outputs:
            live[v] = (i, end if v.kind == "output" else i)
        for v in node.inputs:
            if v in live:
                live[v] = (live[v][0], max(live[v][1], i))
    offsets, size = pack_arena(live)
    return Plan(graph, nodes, offsets, size, list(graph.weights.values()), list(graph.states.values()), live)


def _check_dataflow(graph: Graph, nodes: list[Node]) -> None:
    """Every node fits its op's spec (graph/ir.py's ``OPS``); no op reads a temp before it is written, and no
    op reads a state this plan writes later.

    (Attention must see this step's keys, so its cache's ``kv_store`` has to come first.)
    """
    written: set[Value] = set()
    for i, node in enumerate(nodes):
        _check_slots(i, node)
    state_writes = {v: i for i, n in enumerate(nodes) for v in written_states(n)}
    for i, node in enumerate(nodes):
        for v in node.inputs:
            if v.kind in ("temp", "output") and v not in written:
                raise ValueError(f"node {i} {node!r} reads {v!r} before any node writes it")
            if v.kind == "state" and state_writes.get(v, -1) > i:
                raise ValueError(f"node {i} {node!r} reads state {v!r} before node {state_writes[v]} "
                                 "writes it")
        for v in node.outputs:
            if v in written:
                raise ValueError(f"node {i} {node!r} writes {v!r} a second time")
            written.add(v)
    for name, v in graph.outputs.items():
        if v.kind in ("temp", "output") and v not in written:
            raise ValueError(f"graph output {name!r} ({v!r}) is never written")


_SLOT_VALUES = {"act": ("temp", "output"), "ids": ("input", "temp", "output"), "matrix": ("weight",),
                "table": ("weight",), "vec": ("weight",), "state": ("state",)}


def _check_slots(i: int, node: Node) -> None:
    if node.op not in OPS or not OPS[node.op].graph:
        raise ValueError(f"node {i} {node!r}: {node.op!r} is not a graph op")
    try:
        slots = slots_of(node)
    except ValueError as e:
        raise ValueError(f"node {i} {node!r}: {e}") from None
    for v, s in zip(node.inputs, slots):
        if v.kind not in _SLOT_VALUES[s.kind]:
            raise ValueError(f"node {i} {node!r}: input {s.name!r} is a {v.kind} value, the op reads a {s.kind}")


def pack_arena(live: dict[Value, tuple[int, int]]) -> tuple[dict[Value, int], int]:
    """Byte offsets (``ALIGN``-aligned) and total size of an arena holding ``live``'s values.

    First-fit packing in birth order: a block is freed once the node after its last reader starts.
    :func:`compile` packs all of a plan's values into one arena with it; it is public because a backend
    may split the values over several buffers and pack each one the same way (the wgpu backend does:
    wgpu forbids one buffer bound read-only and read-write in one dispatch).
    """
    offsets: dict[Value, int] = {}
    active: list[tuple[int, int, int]] = []  # (offset, size, last) sorted by offset
    size = 0
    for v, (first, last) in live.items():  # dict order == birth order
        active = [blk for blk in active if blk[2] >= first]
        need = _align(v.nbytes)
        at = 0
        for off, sz, _ in active:
            if off - at >= need:
                break
            at = max(at, off + sz)
        offsets[v] = at
        active.append((at, need, last))
        active.sort()
        size = max(size, at + need)
    return offsets, size


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN
