"""The numpy backend: runs a compiled Plan on the CPU with the reference ops of ``numpy_ops``.

It is both the CPU fallback and the oracle the GPU backend is diffed against (``run(..., trace=...)``
reports every node's outputs). Weights are dequantized to float32 once and cached by tensor name, so a
prefill plan and a decode plan of the same model share them; an embedding table that only feeds
``embed`` stays quantized in the file mapping and is dequantized a few rows at a time. States (the KV
cache: float16 arrays, which round what is written to nearest even as the GPU kernels do) are shared
across plans by name. Activations live in one arena per plan, laid out by the plan's
offsets, so running a plan also exercises its liveness analysis.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidParameterError, OutOfMemoryError
from ..graph.ir import Node, Value, slots_of, written_states
from ..graph.plan import Plan
from ..quant import dequantize, get_type
from . import base
from . import numpy_ops as ops
from .base import ResidentDecode, Step, Trace, check_context, fmt_bytes


class QuantizedRows:
    """A quantized 2-D GGUF tensor that dequantizes only the rows it is indexed with.

    Rows are read from the file at every step, with pread rather than through the mapping, so a model file
    truncated or rewritten while loaded raises GGUFError instead of SIGBUS."""

    def __init__(self, info):
        self.info, self.qtype, self.shape = info, get_type(info.ggml_type), tuple(info.shape)
        self.nbytes = info.nbytes

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        return dequantize(self.info.read_rows(ids), self.qtype)


@dataclass
class _Loaded:
    arena: np.ndarray
    buffers: dict[Value, np.ndarray]        # every value the plan touches -> its array
    steps: list[tuple[Node, Callable[[int, int], None], tuple[np.ndarray, ...]]]
    id_limits: dict[str, int]               # input name -> rows of the table it indexes (embed)


class NumpyBackend:
    """The reference backend (see the module docstring); a :class:`~.base.Backend`."""

    name = "numpy"
    paged = True
    prefill_chunk = 64
    """Default prompt tokens per prefill step (BLAS is already efficient at 64 rows)."""
    resident: ResidentDecode | None = None
    """No GPU-resident loop: the runtime samples on the host after each step."""

    def __init__(self, model, n_ctx: int):
        self.model, self.n_ctx = model, int(n_ctx)
        self._weights: dict[str, np.ndarray | QuantizedRows] = {}
        self._states: dict[str, np.ndarray] = {}
        self._plans: dict[int, _Loaded] = {}          # by Plan.key

    # -- loading ------------------------------------------------------------------------------------
    def load(self, plan: Plan) -> None:
        """Dequantize the plan's weights (once per tensor), allocate its states and arena."""
        if plan.key in self._plans:
            return
        check_context(plan, self.n_ctx)
        full = _needs_full_matrix(plan)
        self._check_memory(plan, full)
        for v in plan.weights:
            cached = self._weights.get(v.tensor)
            if cached is None or (isinstance(cached, QuantizedRows) and v in full):
                self._weights[v.tensor] = self._prepare_weight(v, v in full)
        for v in plan.states:
            have = self._states.get(v.name)
            shape = v.shape if v.dtype == "f16" else (v.shape[0], v.nbytes // v.shape[0])
            if have is not None and have.shape != shape:
                raise InvalidParameterError(f"state {v.name!r} is {have.shape} in another plan, {shape} here")
            if have is None:      # f16 values, or a quantized cache's ggml blocks as bytes (numpy_ops.cache_kind)
                self._states[v.name] = np.zeros(shape, np.float16 if v.dtype == "f16" else np.uint8)
        self._plans[plan.key] = self._bind(plan)

    def _prepare_weight(self, v: Value, full: bool) -> np.ndarray | QuantizedRows:
        """float32 in numpy order, or a row-dequantizer for tables that are only gathered from."""
        info = self.model.tensors[v.tensor]
        if not full:
            return QuantizedRows(info)
        # read (not the mapping): a file truncated during the load is a GGUFError, not SIGBUS
        return np.ascontiguousarray(dequantize(info.read(), info.ggml_type).reshape(v.shape), np.float32)

    def _check_memory(self, plan: Plan, full: set[Value]) -> None:
        """Raise OutOfMemoryError before allocating when the new buffers exceed MemAvailable."""
        new_w = sum(v.nbytes for v in plan.weights
                    if v in full and not isinstance(self._weights.get(v.tensor), np.ndarray))
        new_s = sum(v.nbytes for v in plan.states if v.name not in self._states)
        scratch = max((v.nbytes for v in plan.weights if v in full), default=0)  # dequantize temporaries
        need = new_w + new_s + plan.arena_size + scratch
        avail = base.mem_available()
        if avail is not None and need > avail:
            raise OutOfMemoryError(
                f"numpy backend needs {fmt_bytes(need)} of host memory (weights {fmt_bytes(new_w)}, "
                f"KV cache {fmt_bytes(new_s)}, activations {fmt_bytes(plan.arena_size)}, "
                f"dequantize scratch {fmt_bytes(scratch)}) but only {fmt_bytes(avail)} is available; "
                f"use a smaller n_ctx (now {self.n_ctx}) or a smaller model")

    def _bind(self, plan: Plan) -> _Loaded:
        arena = np.empty(plan.arena_size, np.uint8)
        buffers: dict[Value, np.ndarray] = {}
        for v, off in plan.offsets.items():
            buffers[v] = np.ndarray(v.shape, np.int32 if v.dtype == "i32" else np.float32, buffer=arena, offset=off)
        for v in plan.weights:
            buffers[v] = self._weights[v.tensor]
        for v in plan.states:
            buffers[v] = self._states[v.name]
        for v in plan.inputs.values():
            buffers[v] = np.zeros(v.shape, np.int32 if v.dtype == "i32" else np.float32)
        steps = [(node, _bind_node(node, buffers), tuple(buffers[v] for v in node.outputs))
                 for node in plan.nodes]
        id_limits = {name: n.inputs[1].shape[0] for n in plan.nodes if n.op == "embed"
                     for name, v in plan.inputs.items() if n.inputs[0] is v}
        return _Loaded(arena, buffers, steps, id_limits)

    # -- running ------------------------------------------------------------------------------------
    def run(self, plan: Plan, step: Step, trace: Trace | None = None, read: bool = True,
            meanwhile: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        """One step (see :class:`~.base.Step`); ``trace`` as :data:`~.base.Trace` says. The outputs are
        computed either way (``read`` matters to a device queue only); ``meanwhile`` runs after them."""
        padded = step.padded_inputs(plan, self.n_ctx)
        n_tokens, n_seqs = step.n_tokens, step.n_seqs
        self.load(plan)
        loaded = self._plans[plan.key]
        for name, v in plan.inputs.items():
            limit = loaded.id_limits.get(name)
            ids = padded[name][:n_tokens]
            if limit is not None and not (0 <= ids.min() and ids.max() < limit):
                raise InvalidParameterError(f"input {name!r} holds ids outside 0..{limit - 1}")
            loaded.buffers[v][:] = padded[name]
        for node, run_node, outs in loaded.steps:
            run_node(n_tokens, n_seqs)
            if trace is not None:
                trace(node, outs if node.outputs else tuple(loaded.buffers[v] for v in written_states(node)))
        if meanwhile is not None:
            meanwhile()
        slots = plan.graph.S if "out_rows" in plan.inputs or plan.graph.decode else None
        return {name: loaded.buffers[v][:n_seqs if v.shape[0] == slots else None].copy()
                for name, v in plan.outputs.items()}

    def reset(self) -> None:
        """Zero every KV cache (a new sequence)."""
        for s in self._states.values():
            s.fill(0)

    def memory_bytes(self) -> int:
        """Bytes this backend holds: dequantized weights, states, activation arenas."""
        return (sum(w.nbytes for w in self._weights.values() if isinstance(w, np.ndarray))
                + sum(s.nbytes for s in self._states.values())
                + sum(p.arena.nbytes for p in self._plans.values()))

    def kv_budget(self) -> int | None:
        """A share of available host memory (base.HOST_KV_FRACTION)."""
        return base.host_kv_budget()

    def max_cache_rows(self, row_bytes: int) -> int | None:
        return None

    def weight_bytes(self, plan: Plan) -> int:
        """Bytes of ``plan``'s weights as held (float32 matrices, quantized gather-only tables): what a step
        reads from weights, for bandwidth figures."""
        self.load(plan)
        held = [self._weights[t] for t in {v.tensor for v in plan.weights}]
        return sum(w.nbytes for w in held)


def _needs_full_matrix(plan: Plan) -> set[Value]:
    """Weights read whole: every one but those only gathered from (``table`` slots: embed's table; a tied
    LM head reads the whole table)."""
    return {v for node in plan.nodes for v, s in zip(node.inputs, slots_of(node))
            if v.kind == "weight" and s.kind != "table"}


def _bind_node(node: Node, buffers: dict[Value, np.ndarray]) -> Callable[[int, int], None]:
    """A closure running ``node`` with its arrays bound: ``step(n_tokens, n_seqs)``."""
    fn = getattr(ops, node.op)
    params = inspect.signature(fn).parameters
    wants_n, wants_s = "n_tokens" in params, "n_seqs" in params
    ins = tuple(buffers[v] for v in node.inputs)
    attrs = dict(node.attrs)
    outs = tuple(buffers[v] for v in node.outputs)
    out = outs[0] if len(outs) == 1 else (outs or None)   # multi-output ops return (and take) a tuple
    if "out" in params:  # the op writes into the arena itself
        attrs["out"], out = out, None

    def step(n_tokens: int, n_seqs: int) -> None:
        kw = dict(attrs)
        if wants_n:
            kw["n_tokens"] = n_tokens
        if wants_s:
            kw["n_seqs"] = n_seqs
        result = fn(*ins, **kw)
        if isinstance(out, tuple):
            for o, r in zip(out, result):
                o[...] = r
        elif out is not None:
            out[...] = result
    return step
