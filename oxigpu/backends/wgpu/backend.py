"""The wgpu backend: runs a compiled Plan on the GPU with the kernels of ``ops/``, same interface as NumpyBackend.

Loading (once per plan, nothing on the hot path):
- weights are uploaded straight from the GGUF mapping, still quantized, once per tensor and shared by all
  plans; matrices larger than a storage binding are bound as row ranges by ``matmul``/``embed`` themselves.
  Small vectors (norm weights, biases, rope factors) are stored as f32, dequantized if the file has them
  in another type;
- states (the KV cache, f16: two halves per u32) are allocated once and shared by name across plans;
- every plan gets its activation arenas (a few buffers, see :func:`_banks`, each packed by liveness with
  256-byte aligned offsets, which satisfies any adapter's ``min-storage-buffer-offset-alignment``), one
  buffer per input, and its kernels, bind groups and :class:`~.device.Dispatch` list;
- all buffers are allocated first; then the kernels are built and encoded on ``compile_threads`` workers
  (the driver's pipeline compiles run in parallel) while the loading thread writes the weights.

A step (:meth:`WgpuBackend.run`) writes the Params uniform and the input ids, submits the precomputed
dispatches in one compute pass and reads the outputs back.

GPU-resident decode (:meth:`WgpuBackend.decode_stream`): the decode plan followed by the ``sample``
kernel, which writes the drawn id into the buffer the next step's ``embed`` reads (two buffers used in
turn: a dispatch may not read and write one buffer), so steps run back to back with no host round trip.
Each step's Params (its position) are copied from a staging buffer at the start of its pass; the sampler
keeps its own per-sequence state (settings, RNG counter, history length: a buffer the runtime packs,
``runtime.sampling.SlotBatch``); the drawn ids land in a token-history ring that also feeds the repetition
penalties, and the host reads each batch's ids from it while the next batch is already queued.
"""
from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import (
    ContextLengthError,
    DeviceError,
    InvalidParameterError,
    OutOfMemoryError,
)
from ...graph.ir import KV_BLOCK, Node, Value, args, slots_of, written_states
from ...graph.plan import ALIGN, Plan, pack_arena
from ...quant import dequantize, get_type
from .. import base
from ..base import ResidentDecode, Step, Trace, check_context, fmt_bytes
from .device import (
    Binding,
    Device,
    Dispatch,
    Params,
    implementation,
    pick_adapter,
    webgpu_module,
    workgroups_for,
)
from .kernel import HOST_TYPES, KERNELS, OpKernel, load_kernels
from .layout import PAIRED, SPAN_PAD, gpu_bytes, pair_on_device

_READBACK = 0x0001 | 0x0008       # MAP_READ | COPY_DST
_MAX_BATCH = 64
_FIRST_PIECE = 16   # dispatches in a prefill chunk's first submit (the later ones double)
_WHOLE_ROWS = 8     # plans of at most this many rows prepare their whole pass ahead (_Loaded.whole)
ONE_SEQ_OPS = ("matmul", "matmul_add", "matmul_multi", "matmul_glu")
"""Ops whose kernels learn that their plan serves one sequence (``_build``'s ``one_seq``)."""

log = logging.getLogger("oxigpu")


@functools.cache
def auto_backend() -> str:
    """``"wgpu"`` on a hardware adapter; ``"numpy"`` on a software one (numpy outruns lavapipe) and, with
    one warning line, when no usable adapter exists. Enumerates adapters only (no device is created)."""
    try:
        adapter = pick_adapter(webgpu_module(implementation()), "high-performance")
    except (ImportError, DeviceError) as e:
        log.warning("oxigpu: no usable GPU adapter, using the numpy backend (%s)", str(e).split(";")[0])
        return "numpy"
    return "numpy" if adapter.info["adapter_type"] == "CPU" else "wgpu"


def default_compile_threads(dev: Device) -> int:
    """Kernel-building threads for ``dev``: 8 (at most one per CPU core) on a hardware adapter, 0 on a
    software one.

    The driver compiles each pipeline on the calling thread and wgpu-py's cffi calls release the GIL, so
    threads hide a cold shader cache's compiles behind the weight upload (docs/perf-log.md, "Load time"); a
    plan has at most 14 kinds of node, so more threads have nothing to do. A software adapter's compiles
    contend for the same cores as everything else, so it builds on one."""
    return 0 if dev.is_software else min(8, os.cpu_count() or 1)


@dataclass
class _Uploads:
    """A load's weight data for :meth:`WgpuBackend._write`: (buffer, array, offset) writes, then the buffers
    whose paired types (layout.py) are rearranged on the device after them (buffer, type, GGUF bytes)."""

    writes: list[tuple[Any, np.ndarray, int]] = field(default_factory=list)
    pairs: list[tuple[Any, str, int]] = field(default_factory=list)

    def add(self, buf: Any, kind: str, parts: list[tuple[np.ndarray, int]], nbytes: int) -> None:
        """``parts`` (array, byte offset) into ``buf``, which holds ``nbytes`` GGUF bytes of ``kind``: a paired
        type's whole buffer is paired as one (joined tensors too: the kernels read them as one)."""
        self.writes += [(buf, a, off) for a, off in parts]
        if kind in PAIRED:
            self.pairs.append((buf, kind, nbytes))


@dataclass
class _Loaded:
    """One plan bound to buffers: kernels, their dispatches per node, and where values live."""

    nodes: list[Node]
    arenas: list[Any]
    bindings: dict[Value, Binding]
    inputs: dict[str, Any]
    kernels: list[OpKernel]
    node_dispatches: list[list[Dispatch]]
    dispatches: list[Dispatch]
    written: dict[str, np.ndarray] = field(default_factory=dict)
    """What the host last wrote to the inputs only the host writes (``_HOST_ONLY``, and ``positions`` while
    ``gpu_positions`` is False): an unchanged one is not written again (a prompt's row_seq, out_rows and
    block table repeat from chunk to chunk, a benchmark's positions from prompt to prompt)."""
    gpu_positions: bool = False
    """A resident variant of the plan exists: its steps advance ``positions`` on the device."""
    first_piece: tuple[tuple[Dispatch, ...], Any] | None = None
    """The next prefill chunk's first piece (``_FIRST_PIECE`` dispatches): the dispatches, and the command
    buffer they were encoded into while the last chunk ran."""
    deep_dispatches: list[Dispatch] | None = None
    """``dispatches`` with the kernels that have a variant for long contexts (``OpKernel.deep``) in it,
    for steps whose keys reach ``deep_keys``."""
    deep_keys: int = 0
    whole: bool = False
    """A plan of a few rows (``_WHOLE_ROWS``: a speculative verification): ``first_piece`` is its whole pass,
    its encoding (a third of such a step's GPU time) done while the step before ran."""


_HOST_ONLY = base.HOST_ONLY_INPUTS
"""Step inputs no kernel writes (the resident loop advances ``positions`` and feeds ``tokens`` on the GPU)."""


@dataclass
class _Resident:
    """A decode plan of S rows + ``sample`` for S slots, twice: variant i reads the current ids from ``tok[i]``,
    writes ``tok[1-i]``.

    The sampler's buffers: its slots (settings and state, as the runtime packs them), sparse entries (logit
    biases, ``n_sparse`` of them at most per slot), constraint masks, logprob rows (``_MAX_BATCH`` per slot,
    one per RNG counter modulo that) and the history ring ([S, CAP]: each slot's tokens by position);
    ``base``: each row's position at the stream's first step (next_params adds the step's offset).
    ``sized``: dispatches whose grid follows the step's position (``decode_groups`` of their kernel: the
    one-row decode attention launches only the splits it uses), as (their indices in a variant, one kernel
    of the kind); :meth:`step` gives a variant so sized for a position, built once per distinct grid."""

    S: int
    variants: tuple[list[Dispatch], list[Dispatch]]
    tok: tuple[Any, Any]
    slots: Any
    sparse: Any
    mask: Any
    lp: Any
    ring: Any
    base: Any
    readback: tuple[Any, Any]
    n_sparse: int
    n_sample: int
    """Dispatches of the sampler at the end of a variant (a masked step submits them on their own)."""
    sized: tuple[tuple[tuple[int, ...], Any], ...] = ()
    nxt: tuple[list[Dispatch], ...] = ()
    """Per staging slot and step: the next_params dispatch (the step's Params into the uniform, each row's
    position into the plan's ``positions``)."""
    by_grid: dict[tuple, list[Dispatch]] = field(default_factory=dict)

    @property
    def buffers(self) -> tuple[Any, ...]:
        return (*self.tok, self.slots, self.sparse, self.mask, self.lp, self.ring, self.base, *self.readback)

    def step(self, i: int, pos: int) -> list[Dispatch]:
        """Variant ``i``'s dispatches for the step at ``pos``."""
        if not self.sized:
            return self.variants[i]
        key = (i, *(kernel.decode_groups(pos) for _, kernel in self.sized))
        ds = self.by_grid.get(key)
        if ds is None:
            ds = list(self.variants[i])
            for (idx, _), n in zip(self.sized, key[1:]):
                for j in idx:
                    ds[j] = ds[j]._replace(workgroups=workgroups_for(n))
            self.by_grid[key] = ds
        return ds


class WgpuBackend:
    """Executes Plans on one wgpu device (see the module docstring); a :class:`~..base.Backend` with the
    GPU-resident decode loop (:class:`~..base.ResidentDecode`)."""

    name = "wgpu"
    paged = True
    """Its kernels read K/V through block tables: a step carries rows of many sequences."""
    resident_batch = 8
    """Decode steps per GPU-resident batch (the first batches are shorter, so streaming starts at once)."""
    compile_threads: int | None = None
    """Worker threads that build and encode a plan's kernels (the driver compiling their pipelines) while
    the loading thread writes its weights; 0 builds them after the writes on the loading thread. None (the
    default) is :func:`default_compile_threads` of the device, set at construction."""

    @property
    def prefill_chunk(self) -> int:
        """Default prompt tokens per prefill step: 512 on a GPU (one pass per 512 tokens: fewer dispatches,
        fuller GEMM grids); 64 on a CPU adapter, where each chunk's GEMMs are slow and tests run."""
        return 64 if self.dev.is_software else 512

    def __init__(self, model, n_ctx: int, device: Device | None = None):
        self.model, self.n_ctx = model, int(n_ctx)
        self.dev = device or Device.get()
        if self.compile_threads is None:
            self.compile_threads = default_compile_threads(self.dev)
        load_kernels()
        self._weights: dict[str, tuple[Any, str]] = {}       # tensor -> (buffer, kernel type name)
        self._states: dict[str, tuple[Any, tuple[int, ...]]] = {}
        self._plans: dict[int, _Loaded] = {}                  # by Plan.key
        self._resident: dict[tuple[int, int, bool], _Resident] = {}   # by (Plan.key, bias slots, greedy)
        self._staging: list[Any] = []                         # per batch slot: each step's Params
        self._step_stride = 0                                 # bytes per step in a staging buffer

    @property
    def resident(self) -> ResidentDecode:
        """This backend decodes GPU-resident (:meth:`decode_stream`)."""
        return self

    # -- loading ------------------------------------------------------------------------------------
    def load(self, plan: Plan) -> None:
        """Allocate the plan's weights (once per tensor), states, arenas and inputs, then build and encode
        its kernels: on ``compile_threads`` workers while this thread writes the weights, or after that."""
        if plan.key in self._plans:
            return
        check_context(plan, self.n_ctx)
        if ALIGN % self.dev.storage_align:
            raise DeviceError(f"plan offsets are {ALIGN}-aligned; the adapter needs {self.dev.storage_align}")
        raw = _raw_weights(plan)
        packed = [pack_arena(live) for live in _banks(plan)]
        self._check_memory(plan, raw, sum(size for _, size in packed))
        uploads = self._allocate(plan, raw)
        arenas, bindings, types, inputs = self._bindings(plan, packed)
        lowered = list(plan.nodes)
        one_seq = not plan.graph.decode and plan.graph.S == 1
        jobs = [(node, [types[v] for v in node.inputs], [bindings[v] for v in (*node.inputs, *node.outputs)],
                 one_seq) for node in lowered]
        if self.compile_threads:
            pool = ThreadPoolExecutor(self.compile_threads, thread_name_prefix="oxigpu-compile")
            try:
                futures = {i: pool.submit(self._build, *jobs[i]) for i in _new_kinds_first(jobs)}
                self._write(uploads)
                built = [futures[i].result() for i in range(len(jobs))]   # the first failing node raises
            finally:
                pool.shutdown(cancel_futures=True)
        else:
            self._write(uploads)
            built = [self._build(*job) for job in jobs]
        node_dispatches = [ds for _, ds in built]
        loaded = _Loaded(lowered, arenas, bindings, inputs, [k for k, _ in built], node_dispatches,
                         [d for ds in node_dispatches for d in ds])
        loaded.whole = plan.T <= _WHOLE_ROWS
        deep = [k for k, _ in built if k.deep is not None]
        if deep:   # the plan's dispatches for long contexts: those kernels' variants in their place
            loaded.deep_keys = min(k.deep_keys for k in deep)
            loaded.deep_dispatches = [d for (k, ds), job in zip(built, jobs)
                                      for d in (k.deep.encode(job[2]) if k.deep is not None else ds)]
        self._plans[plan.key] = loaded

    def _allocate(self, plan: Plan, raw: set[Value]) -> _Uploads:
        """Buffers for the plan's weights not yet on the device (their data returned for :meth:`_write`)
        and for its states not yet allocated."""
        uploads = _Uploads()
        for node in plan.nodes:
            if node.op in ("matmul_multi", "matmul_glu", "matmul_id_glu"):
                self._allocate_joined(node, uploads)
        for v in plan.weights:
            if v.tensor not in self._weights:
                data = self.model.tensors[v.tensor].data if v in raw else self._f32(v.tensor)
                kind = get_type(self.model.tensors[v.tensor].ggml_type).name if v in raw else "f32"
                buf = self.dev.create_buffer(gpu_bytes(kind, data.nbytes), label=v.tensor)
                uploads.add(buf, kind, [(data, 0)], data.nbytes)
                self._weights[v.tensor] = (buf, kind)
        for v in plan.states:
            have = self._states.get(v.name)
            if have is not None and have[1] != v.shape:
                raise InvalidParameterError(f"state {v.name!r} is {have[1]} in another plan, {v.shape} here")
            if have is None:
                self._states[v.name] = (self.dev.create_buffer(v.nbytes, label=v.name), v.shape)
        return uploads

    def _write(self, uploads: _Uploads) -> None:
        for buf, data, offset in uploads.writes:   # in order: a part's padded tail is overwritten by the next
            self.dev.write(buf, data, offset)
        for job in uploads.pairs:   # queued after the writes: the device runs them in that order
            pair_on_device(self.dev, *job)

    def _loaded(self, plan: Plan) -> _Loaded:
        """``plan``'s buffers, kernels and dispatches (loaded first if it is not yet)."""
        self.load(plan)
        return self._plans[plan.key]

    def node_dispatches(self, plan: Plan) -> list[tuple[Node, list[Dispatch]]]:
        """Each node of ``plan`` with the dispatches a host step submits for it (for profiling)."""
        return list(zip(plan.nodes, self._loaded(plan).node_dispatches))

    def _allocate_joined(self, node: Node, uploads: _Uploads) -> None:
        """A ``matmul_multi``'s (``matmul_glu``'s, ``matmul_id_glu``'s) weights of one type back to back in one
        buffer (their biases likewise), so its kernel runs them as one dispatch; skipped for weights already
        uploaded or over one binding."""
        ws = args(node, "w") or args(node, "w_gate") + args(node, "w_up")
        bs = args(node, "bias")
        for t in dict.fromkeys(w.ggml_type for w in ws):
            idx = [i for i, w in enumerate(ws) if w.ggml_type == t]
            tensors = [ws[i].tensor for i in idx] + [bs[i].tensor for i in idx if bs]
            nbytes = sum(self.model.tensors[ws[i].tensor].nbytes for i in idx)
            if len(idx) < 2 or any(x in self._weights for x in tensors) \
                    or nbytes + SPAN_PAD + 16 > self.dev.max_storage_binding:
                continue
            qt = get_type(t).name
            self._join([self.model.tensors[ws[i].tensor].data for i in idx], [ws[i].tensor for i in idx], qt,
                       uploads)
            if bs:
                self._join([self._f32(bs[i].tensor) for i in idx], [bs[i].tensor for i in idx], "f32", uploads)

    def _join(self, arrays: list[np.ndarray], tensors: list[str], kind: str, uploads: _Uploads) -> None:
        """One buffer for ``arrays``, each tensor bound as its (buffer, offset, size) range."""
        views = [np.ascontiguousarray(a).view(np.uint8).reshape(-1) for a in arrays]
        offsets = np.cumsum([0] + [a.size for a in views]).tolist()
        label = "+".join(tensors)
        buf = self.dev.create_buffer(gpu_bytes(kind, offsets[-1]), label=label)
        if all(o % 4 == 0 for o in offsets[:-1]):   # written in place: no host copy of GBs of weights
            uploads.add(buf, kind, list(zip(views, offsets)), offsets[-1])
        else:
            uploads.add(buf, kind, [(np.concatenate(views), 0)], offsets[-1])
        for t, a, off in zip(tensors, views, offsets):
            self._weights[t] = ((buf, off, a.size), kind)

    def _f32(self, tensor: str) -> np.ndarray:
        """A small tensor as float32 (dequantized if the file stores it in another type)."""
        info = self.model.tensors[tensor]
        return info.data if get_type(info.ggml_type).name == "F32" else dequantize(info.data, info.ggml_type)

    def _check_memory(self, plan: Plan, raw: set[Value], arena: int) -> None:
        """OutOfMemoryError, before any allocation, when a buffer or the total cannot fit this adapter."""
        weights = {v.tensor: self._weight_bytes(v, v in raw) for v in plan.weights if v.tensor not in self._weights}
        states = {v.name: v.nbytes for v in plan.states if v.name not in self._states}
        need = sum(weights.values()) + sum(states.values()) + arena
        limits, binding = self.dev.limits, self.dev.max_storage_binding
        max_buffer = int(limits["max-buffer-size"])
        adapter = self.dev.info()["name"]
        kv_row = sum(v.nbytes // v.shape[0] for v in plan.states)
        hint = (f"use a smaller n_ctx (now {self.n_ctx}; the KV cache takes {kv_row} B per token) or "
                f"backend='numpy'")
        too_big = [(n, b) for n, b in (*weights.items(), *states.items(), ("activations", arena))
                   if b > max_buffer]
        too_big += [(v.name, v.nbytes) for v in plan.states if v.nbytes > binding]
        too_big += [(v.name, v.nbytes) for v in plan.offsets if v.nbytes > binding]
        too_big += [(v.tensor, b) for v in plan.weights if v not in raw
                    and (b := self._weight_bytes(v, False)) > binding]
        if too_big:
            name, nbytes = max(too_big, key=lambda t: t[1])
            raise OutOfMemoryError(
                f"wgpu backend: {name!r} needs a buffer of {fmt_bytes(nbytes)} but {adapter} allows "
                f"{fmt_bytes(min(max_buffer, binding))} per storage binding; {hint}")
        avail = base.mem_available() if self.dev.is_software else None   # a CPU adapter allocates host memory
        if avail is not None and need > avail:
            raise OutOfMemoryError(
                f"wgpu backend needs {fmt_bytes(need)} on {adapter} (weights "
                f"{fmt_bytes(sum(weights.values()))}, KV cache {fmt_bytes(sum(states.values()))}, activations "
                f"{fmt_bytes(arena)}) but only {fmt_bytes(avail)} is available; {hint}")

    def _weight_bytes(self, v: Value, raw: bool) -> int:
        info = self.model.tensors[v.tensor]
        return gpu_bytes(get_type(info.ggml_type).name, info.nbytes) if raw else v.nbytes

    def _bindings(self, plan: Plan, packed: list[tuple[dict[Value, int], int]]
                  ) -> tuple[list[Any], dict[Value, Binding], dict[Value, str], dict[str, Any]]:
        """The plan's arena and input buffers; every value's binding and type (weights and states allocated)."""
        bindings: dict[Value, Binding] = {}
        arenas = []
        for i, (offsets, size) in enumerate(packed):
            arenas.append(self.dev.create_buffer(size, label=f"arena {i}"))
            bindings.update({v: (arenas[-1], off, v.nbytes) for v, off in offsets.items()})
        types: dict[Value, str] = {v: v.dtype for v in plan.offsets}
        for v in plan.weights:
            bindings[v], types[v] = self._weights[v.tensor]
        for v in plan.states:
            bindings[v], types[v] = self._states[v.name][0], v.dtype
        inputs = {}
        for name, v in plan.inputs.items():
            inputs[name] = bindings[v] = self.dev.create_buffer(v.nbytes, label=name)
            types[v] = v.dtype
        return arenas, bindings, types, inputs

    def _build(self, node: Node, in_types: list[str], buffers: list[Binding],
               one_seq: bool = False) -> tuple[OpKernel, list[Dispatch]]:
        """``node``'s kernel and dispatches (its pipelines compiled, some kernels compile while encoding);
        runs on a ``compile_threads`` worker when there are any. ``one_seq``: a plan of one sequence's rows
        (not a decode batch): its matmuls keep the GEMV up to ``gemv_rows`` rows (ops/matmul.py gemv_rows),
        so a speculative verification's rows sum as one-row steps do."""
        if node.op not in KERNELS:
            raise DeviceError(f"no wgpu kernel for op {node.op!r} (node {node.name})")
        attrs = {**node.attrs, "one_seq": True} if one_seq and node.op in ONE_SEQ_OPS else node.attrs
        try:
            kernel = KERNELS[node.op](self.dev, attrs, [v.shape for v in node.inputs], in_types,
                                      [v.shape for v in node.outputs])
            return kernel, kernel.encode(buffers)
        except DeviceError as e:
            raise DeviceError(f"{_describe(node, in_types)} (kernel {KERNELS[node.op].__name__}): {e}") from e

    # -- running ------------------------------------------------------------------------------------
    def run(self, plan: Plan, step: Step, trace: Trace | None = None, read: bool = True,
            meanwhile: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        """One step, as NumpyBackend.run. With ``trace`` (a debug mode) every node is submitted on its own
        and its outputs (for ``kv_store``: the two caches) are read back and passed to ``trace``. ``read``
        False: submitted, nothing read back ({}): the host encodes the next chunk while the GPU runs this
        one (the next chunk's input writes queue after this chunk's work)."""
        padded = step.padded_inputs(plan, self.n_ctx)
        n_tokens = step.n_tokens
        loaded = self._loaded(plan)
        with self.dev.step_lock:   # the device's params buffer is shared by every backend on it
            self._write_inputs(loaded, padded)
            self.dev.write_params(Params(pos=int(step.positions[0]), n_tokens=n_tokens, n_seqs=step.n_seqs))
            if trace is None:
                deep = loaded.deep_dispatches is not None and int(step.positions.max()) + 1 >= loaded.deep_keys
                self._submit_step(loaded, pieces=n_tokens > 1, deep=deep)
            else:
                for node, ds in zip(plan.nodes, loaded.node_dispatches):
                    self.dev.submit(ds)
                    vals = node.outputs or written_states(node)
                    trace(node, tuple(self._read_value(loaded, v) for v in vals))
            if meanwhile is not None:
                meanwhile()
            if not read and trace is None:
                return {}
            # logits of S slots: only the n_seqs valid rows cross the bus (the rest is padding)
            slots = plan.graph.S if "out_rows" in plan.inputs or plan.graph.decode else None
            return {name: self._read_value(loaded, v, step.n_seqs if v.shape[0] == slots else None)
                    for name, v in plan.outputs.items()}

    def _write_inputs(self, loaded: _Loaded, padded: dict[str, np.ndarray]) -> None:
        for name, host in padded.items():
            self._write_input(loaded, name, host)

    def _write_input(self, loaded: _Loaded, name: str, host: np.ndarray) -> None:
        """Write step input ``name``, skipping a host-only one equal to what its buffer holds: each write is
        a queued copy the chunk's first submit waits behind (docs/perf-log.md, fourth session). Every
        write of a plan's inputs goes through here, so ``loaded.written`` never misstates a buffer."""
        kept = name in _HOST_ONLY or (name == "positions" and not loaded.gpu_positions)
        if kept:
            last = loaded.written.pop(name, None)
            if last is not None and last.shape == host.shape and last.tobytes() == host.tobytes():
                loaded.written[name] = last
                return
        self.dev.write(loaded.inputs[name], host)
        if kept:   # positions may be the caller's array (Step.padded_inputs): keep a copy
            loaded.written[name] = host if name in _HOST_ONLY else host.copy()

    def _submit_step(self, loaded: _Loaded, pieces: bool = False, deep: bool = False) -> None:
        """Submit a step's one pass; when wgpu rejects it, resubmit node by node to name the node at fault.

        ``pieces`` (prefill chunks): submit as the passes are encoded, in pieces of 16, 32, 64, ...
        dispatches, so the GPU starts on the first while the host encodes the rest instead of waiting for
        the whole chunk's encoding (1-4 ms of Python and wgpu-core per chunk: docs/perf-log.md, Prefill)."""
        try:
            ds = loaded.deep_dispatches if deep and loaded.deep_dispatches is not None else loaded.dispatches
            if pieces:
                i, n = 0, len(ds) if loaded.whole else _FIRST_PIECE
                first, loaded.first_piece = loaded.first_piece, None
                if first is not None and first[1] is not None and first[0] == tuple(ds[:n]):
                    self.dev.submit_prepared(first[1])
                    i, n = n, 2 * n
                while i < len(ds):
                    self.dev.submit(ds[i:i + n])
                    i, n = i + n, 2 * n
            else:
                self.dev.submit(ds)
        except DeviceError as e:
            if not self.dev.lost:
                for node, kernel, nds in zip(loaded.nodes, loaded.kernels, loaded.node_dispatches):
                    try:
                        self.dev.submit(nds)
                    except DeviceError:
                        raise DeviceError(f"{_describe(node, kernel.in_types)} (kernel "
                                          f"{type(kernel).__name__}): {e}") from e
            raise
        if pieces:
            # the next chunk's first piece, encoded now while the GPU runs this one, so that chunk submits
            # right after its input writes; kept with its dispatches, so a chunk whose first dispatches
            # differ (the other attention variant) encodes its own. This step is submitted already: a
            # failure here only leaves the next chunk to encode its piece itself
            piece = ds if loaded.whole else ds[:_FIRST_PIECE]
            try:
                loaded.first_piece = (tuple(piece), self.dev.prepare(piece))
            except DeviceError:
                loaded.first_piece = None

    def _read_value(self, loaded: _Loaded, v: Value, rows: int | None = None) -> np.ndarray:
        """``v`` read back (its first ``rows`` rows only, when given)."""
        b = loaded.bindings[v]
        buf, off = (b[0], b[1]) if isinstance(b, tuple) else (b, 0)
        shape = v.shape if rows is None else (rows, *v.shape[1:])
        return self.dev.read(buf, HOST_TYPES[v.dtype], shape, off)

    def reset(self) -> None:
        """Zero every KV cache (a new sequence)."""
        enc = self.dev.device.create_command_encoder()
        for buf, _ in self._states.values():
            enc.clear_buffer(buf)
        with self.dev.step_lock:
            self.dev.queue.submit([enc.finish()])

    def memory_bytes(self) -> int:
        """Device bytes this backend holds: weights, states, arenas, inputs and the resident buffers."""
        bufs = list(self._weight_buffers(self._weights)) + [b for b, _ in self._states.values()]
        for p in self._plans.values():
            bufs += [*p.arenas, *p.inputs.values()]
        bufs += [b for r in self._resident.values() for b in r.buffers]
        bufs += self._staging
        return sum(b.size for b in bufs)

    def kv_budget(self) -> int | None:
        """A share of host memory on a software adapter (it allocates there), else base.DEFAULT_GPU_KV_BYTES."""
        return base.host_kv_budget() if self.dev.is_software else base.DEFAULT_GPU_KV_BYTES

    def max_cache_rows(self, row_bytes: int) -> int | None:
        """A layer's cache is one buffer, bound whole by the attention kernels."""
        return min(self.dev.max_storage_binding, int(self.dev.limits["max-buffer-size"])) // row_bytes

    def weight_bytes(self, plan: Plan) -> int:
        """Device bytes of ``plan``'s weights as stored (raw GGUF blocks for matrices, f32 vectors): what a
        step reads from weights, for bandwidth figures."""
        self.load(plan)
        return sum(b.size for b in self._weight_buffers({v.tensor for v in plan.weights}))

    def _weight_buffers(self, tensors) -> dict[Any, None]:
        """The distinct buffers holding ``tensors`` (joined weights share one)."""
        return dict.fromkeys(b[0] if isinstance(b, tuple) else b for b, _ in map(self._weights.get, tensors))

    def resident_step(self, plan: Plan, sampling: Any, pos: int | None = None
                      ) -> list[tuple[Node | None, list[Dispatch]]]:
        """One GPU-resident decode step as it is encoded: each node's dispatches, then ``(None, the
        sampler's and the next step's Params copy)``. For profiling and dispatch counts
        (``tools/bench.py``); ``sampling`` as in :meth:`decode_stream`; ``pos``: the step's position
        (grids sized for it), else grids for any."""
        res = self._resident_for(plan, sampling)
        flat, groups, i = res.variants[0] if pos is None else res.step(0, pos), [], 0
        for node, ds in zip(plan.nodes, self._loaded(plan).node_dispatches):
            groups.append((node, flat[i:i + len(ds)]))
            i += len(ds)
        groups.append((None, [*flat[i:], res.nxt[0][0]]))
        return groups

    # -- GPU-resident decode ------------------------------------------------------------------------
    def decode_stream(self, plan: Plan, context: Sequence[int], sampling: Any, n_steps: int,
                      block_table: Sequence[int] | None = None) -> Iterator[tuple[list[int], np.ndarray | None]]:
        """One sequence's GPU-resident decode (:meth:`decode_batch` with one slot): the ids a batch at a time,
        with their logprob rows (int32 [k, 1 + alternatives, 2]: id, logprob bits) when asked. ``block_table``
        None: blocks 0, 1, 2, ... in order."""
        mb = plan.inputs["block_table"].shape[1]
        table = list(range(mb)) if block_table is None else list(block_table)
        for ids, rows in self.decode_batch(plan, [context], sampling, n_steps, [table]):
            yield [t[0] for t in ids], None if rows is None else rows[0]

    def decode_batch(self, plan: Plan, contexts: Sequence[Sequence[int]], sampling: Any, n_steps: int,
                     block_tables: Sequence[Sequence[int]], masks: Callable[[], np.ndarray | None] | None = None,
                     whole: bool = False) -> DecodeStream:
        """Run up to ``n_steps`` decode steps of ``len(contexts)`` sequences on the device, one row each, with
        no host round trip between steps; yield each batch of steps as its drawn ids ([k][n]: step, then
        sequence) and, when asked, logprob rows ([n, k, 1 + alternatives, 2]).

        ``plan`` is a decode plan of T >= n rows (rows past n are padding). ``sampling`` is the runtime's
        ``SlotBatch`` of T slots (settings and state of each sequence: history length ``len(contexts[s])``,
        RNG counter; sparse entries; ``greedy``, ``logprobs``, ``spec`` for the kernel); its arrays are
        uploaded as they are. Step ``i`` evaluates each sequence's newest token (its context's last for i =
        0, else the id it drew at step ``i - 1``) at position ``len(contexts[s]) - 1 + i`` and samples as the
        runtime's numpy twin would. Sequence s's cache holds ``contexts[s][:-1]`` in the blocks of
        ``block_tables[s]``, which must cover every position the steps write (the host takes them before it
        queues the steps). The next batch is queued before a batch is read back, so the GPU never idles on
        the host; closing the iterator stops it within one batch, and its ``stop()`` queues nothing more
        but still yields the batch already queued (its ids are valid: the GPU runs it anyway).

        ``masks`` (constrained sequences, whose next mask depends on the id just drawn): steps are yielded
        one at a time, each as two submissions, the forward then the sampler, and step i + 1's forward is
        queued before step i's id is read (it takes that id on the device). ``masks()`` is called between
        step i's two submissions for i >= 1 (after the consumer took step i - 1's ids), so the host computes
        the masks while the GPU runs the forward; it returns uint32 [rows, W] for the first rows' slots
        (None: unchanged). Step 0 draws with ``sampling.mask``. ``whole`` (no masks): the steps in one batch of
        up to ``_MAX_BATCH``, one read-back (a speculative round's drafts: nobody streams them, and each
        read-back is a host round trip).
        """
        n, T = len(contexts), plan.T
        if not plan.graph.decode or not 1 <= n <= T or len(block_tables) != n:
            raise InvalidParameterError(f"GPU-resident decode runs a decode plan of T >= {n} rows, one per "
                                        f"sequence, each with its block table (plan T={plan.T})")
        pos0 = [len(c) - 1 for c in contexts]
        if min(pos0) < 0 or max(pos0) + n_steps > self.n_ctx:
            raise ContextLengthError(f"decode steps at positions up to {max(pos0) + n_steps - 1} exceed the "
                                     f"context of {self.n_ctx}")
        res = self._resident_for(plan, sampling)
        if sampling.slots.shape[0] != T:
            raise InvalidParameterError(f"the sampler's batch has {sampling.slots.shape[0]} slots, the plan {T}")
        loaded = self._loaded(plan)
        mb = plan.inputs["block_table"].shape[1]
        table = np.zeros((T, mb), np.int32)
        for s, (bt, p) in enumerate(zip(block_tables, pos0)):
            if len(bt) * KV_BLOCK < p + n_steps or len(bt) > mb:
                raise InvalidParameterError(f"a block table of {len(bt)} blocks does not cover positions up to "
                                            f"{p + n_steps - 1} (or exceeds the plan's {mb})")
            table[s, :len(bt)] = bt
        cap = self.n_ctx + 1
        ring = np.zeros((T, cap), np.int32)
        last = np.zeros(T, np.int32)
        for s, c in enumerate(contexts):
            ring[s, :len(c)] = c
            last[s] = c[-1]
        self._write_input(loaded, "block_table", table)
        self._write_input(loaded, "row_seq", np.arange(T, dtype=np.int32))
        self.dev.write(res.base, np.asarray(pos0 + [0] * (T - n), np.int32))
        sparse = np.zeros((T, res.n_sparse, 2), np.uint32)
        sparse[:, :sampling.sparse.shape[1]] = sampling.sparse
        self.dev.write(res.slots, np.ascontiguousarray(sampling.slots, np.uint32))
        self.dev.write(res.sparse, sparse)
        if sampling.mask is not None:
            self.dev.write(res.mask, np.ascontiguousarray(sampling.mask, np.uint32))
        self.dev.write(res.ring, ring)
        self.dev.write(res.tok[0], last)
        counters = list(sampling.counters[:n]) if sampling.counters else [0] * n
        ctl = DecodeStream()
        if masks is None:
            ctl.gen = self._stream(res, n, pos0, n_steps, bool(sampling.logprobs), counters, ctl, whole)
        else:
            ctl.gen = self._stream_masked(res, n, pos0, n_steps, bool(sampling.logprobs), counters, ctl, masks)
        return ctl

    def _stream(self, res: _Resident, n: int, pos0: list[int], n_steps: int, logprobs: bool, counters: list[int],
                ctl: DecodeStream, whole: bool = False) -> Iterator[tuple[list[list[int]], np.ndarray | None]]:
        sizes, done = [], 0
        while done < n_steps:   # 2, 4, ... up to resident_batch: the first ids arrive quickly
            step_max = _MAX_BATCH if whole else min(self.resident_batch, _MAX_BATCH, 2 << len(sizes))
            sizes.append(min(n_steps - done, step_max))
            done += sizes[-1]
        step = 0
        lock = self.dev.step_lock   # a batch's pass writes the device's shared params buffer
        with lock:
            index = [self._submit(self._encode_batch(res, n, pos0, step, sizes[0], 0, logprobs)), None]
        queued = 1
        for b, k in enumerate(sizes):
            if b >= queued:
                return              # stopped: nothing more was queued
            with lock:
                if b + 1 < len(sizes) and not ctl.stopped:   # queued before this batch is read back: the GPU
                    index[(b + 1) % 2] = self._submit(       # never waits on the host
                        self._encode_batch(res, n, pos0, step + k, sizes[b + 1], (b + 1) % 2, logprobs))
                    queued += 1
                ids, rows = self._read_tokens(res, n, b % 2, k, index[b % 2], logprobs)
            yield ids, _lp_rows(rows, counters, step, k, n)
            step += k

    def _stream_masked(self, res: _Resident, n: int, pos0: list[int], n_steps: int, logprobs: bool,
                       counters: list[int], ctl: DecodeStream, masks: Callable[[], np.ndarray | None]
                       ) -> Iterator[tuple[list[list[int]], np.ndarray | None]]:
        """:meth:`decode_batch` with ``masks``: step i's forward (queued while step i - 1's id was read), the
        host's masks for it, its sampler; then step i + 1's forward, then step i's id.

        ``masks()`` may give the masks of a run of k steps ([k, rows, W]: a constraint's forced tokens, each
        drawn under a one-token mask, then the mask of the draw after them): the run's steps are queued back
        to back, each mask written between two submissions (the queue applies a write after the work
        submitted before it), and their k ids are read back at once."""
        lock = self.dev.step_lock
        with lock:
            self._submit(self._encode_step(res, n, pos0, 0, logprobs, forward=True))
        step = run = 0
        while step < n_steps:
            with lock:
                m = masks() if step else None
                if m is not None and m.ndim == 2:
                    m = m[None]
                k = 1 if m is None else max(1, min(m.shape[0], n_steps - step, _MAX_BATCH))
                for j in range(k):
                    if m is not None:
                        self.dev.write(res.mask, np.ascontiguousarray(m[j], np.uint32))
                    enc = self.dev.device.create_command_encoder()
                    self.dev.encode(enc, self._step_dispatches(res, n, pos0, step + j, forward=False))
                    if j + 1 < k:     # a forced step's id is read with the run's: its next forward goes along
                        self.dev.encode(enc, self._step_dispatches(res, n, pos0, step + j + 1, forward=True))
                        self._submit(enc.finish())
                        continue
                    self._copy_ids(enc, res, n, pos0, step, k, run % 2, logprobs)
                    index = self._submit(enc.finish())
                if step + k < n_steps and not ctl.stopped:
                    self._submit(self._encode_step(res, n, pos0, step + k, logprobs, forward=True))
                ids, rows = self._read_tokens(res, n, run % 2, k, index, logprobs)
            yield ids, _lp_rows(rows, counters, step, k, n)
            step, run = step + k, run + 1
            if ctl.stopped:
                return

    def _step_dispatches(self, res: _Resident, n: int, pos0: list[int], step: int, forward: bool
                         ) -> list[Dispatch]:
        """One step's forward (its Params written to staging buffer ``step % 2``, copied in by its first
        dispatch, then the plan's kernels) or its sampler."""
        slot = step % 2
        ds = res.step(slot, max(pos0) + step)
        if forward:
            self.dev.write(self._staging[slot], Params(pos=step, n_tokens=n, n_seqs=n).pack())
            return [res.nxt[slot][0], *ds[:len(ds) - res.n_sample]]
        return ds[len(ds) - res.n_sample:]

    def _encode_step(self, res: _Resident, n: int, pos0: list[int], step: int, logprobs: bool, forward: bool
                     ) -> Any:
        """One step's forward or its sampler and the copy of its ids (and logprob rows) into readback buffer
        ``step % 2``, as a command buffer."""
        enc = self.dev.device.create_command_encoder()
        self.dev.encode(enc, self._step_dispatches(res, n, pos0, step, forward))
        if not forward:
            self._copy_ids(enc, res, n, pos0, step, 1, step % 2, logprobs)
        return enc.finish()

    def _encode_batch(self, res: _Resident, n: int, pos0: list[int], step0: int, k: int, slot: int,
                      logprobs: bool) -> Any:
        """Steps ``step0 .. step0 + k - 1`` in one compute pass: per step, a dispatch copies its Params from
        staging buffer ``slot`` into the uniform and each row's position (its first plus the step's offset)
        into the plan's positions (``next_params.wgsl``), then the step's kernels; at the end, copy each
        sequence's k drawn ids from its ring row (and the logprob rows) into readback buffer ``slot``."""
        params = b"".join(Params(pos=s, n_tokens=n, n_seqs=n).pack().ljust(self._step_stride, b"\0")
                          for s in range(step0, step0 + k))
        self.dev.write(self._staging[slot], params)
        enc = self.dev.device.create_command_encoder()
        nxt = res.nxt[slot]
        top = max(pos0)
        self.dev.encode(enc, [d for j in range(k)
                              for d in (nxt[j], *res.step((step0 + j) % 2, top + step0 + j))])
        self._copy_ids(enc, res, n, pos0, step0, k, slot, logprobs)
        return enc.finish()

    def _copy_ids(self, enc: Any, res: _Resident, n: int, pos0: list[int], step0: int, k: int, slot: int,
                  logprobs: bool) -> None:
        """Copy each sequence's ids of steps ``step0 .. step0 + k - 1`` from its ring row (and the logprob
        rows) into readback buffer ``slot``."""
        cap = self.n_ctx + 1
        for s in range(n):
            enc.copy_buffer_to_buffer(res.ring, (s * cap + pos0[s] + step0 + 1) * 4, res.readback[slot],
                                      s * _MAX_BATCH * 4, k * 4)
        if logprobs:
            enc.copy_buffer_to_buffer(res.lp, 0, res.readback[slot], res.S * _MAX_BATCH * 4, res.lp.size)

    def _submit(self, command_buffer: Any) -> int | None:
        try:
            return self.dev.submit_indexed(command_buffer)
        except Exception as e:
            raise self.dev.error("submitting a GPU-resident decode batch", e) from e

    def _read_tokens(self, res: _Resident, n: int, slot: int, k: int, index: int | None, logprobs: bool
                     ) -> tuple[list[list[int]], np.ndarray | None]:
        """Batch ``index``'s ``k`` ids per sequence ([k][n]) and all logprob rows ([n, _MAX_BATCH, ...]) from
        readback ``slot``; waits for that batch only, not the next."""
        head = ((n - 1) * _MAX_BATCH + k) * 4
        try:
            size = res.S * _MAX_BATCH * 4 + res.lp.size if logprobs else head
            data = np.frombuffer(self.dev.read_submitted(res.readback[slot], size, index), np.int32)
        except Exception as e:
            raise self.dev.error(f"reading {k} decoded token ids of {n} sequences", e) from e
        ids = np.zeros((n, _MAX_BATCH), np.int32)
        ids.reshape(-1)[:len(data[:head // 4])] = data[:head // 4]
        rows = data[res.S * _MAX_BATCH:].reshape(res.S, _MAX_BATCH, -1, 2) if logprobs else None
        return ids[:, :k].T.tolist(), rows

    def _resident_for(self, plan: Plan, sampling: Any) -> _Resident:
        """The resident variant of ``plan`` for ``sampling`` (a ``SlotBatch`` of plan.T slots; built once per
        kind of sampler): up to its number of sparse entries, rounded up to a power of two; ``greedy`` takes
        the sampler that only finds the best token (3 dispatches instead of 5 on a 152k vocabulary, no
        sorts)."""
        nb, greedy = _sparse_slots(sampling), bool(sampling.greedy)
        key = (plan.key, nb, greedy)
        if key in self._resident:
            return self._resident[key]
        loaded = self._loaded(plan)
        loaded.gpu_positions = True           # next_params (below) writes them from now on
        loaded.written.pop("positions", None)
        logits = plan.outputs["logits"]
        tokens = plan.inputs["tokens"]
        if not self._staging:
            a = self.dev.storage_align
            self._step_stride = -(-Params.NBYTES // a) * a
            self._staging = [self.dev.create_buffer(_MAX_BATCH * self._step_stride, label=f"params staging {i}")
                             for i in range(2)]
        S, tok, slots, sparse, mask, lp, ring, base, readback, sampler = self._sampler(plan, sampling, nb, greedy)
        variants = []
        for i in range(2):
            ds = []
            for node, kernel, own in zip(loaded.nodes, loaded.kernels, loaded.node_dispatches):
                if tokens in node.inputs:
                    b = {**loaded.bindings, tokens: tok[i]}
                    own = kernel.encode([b[v] for v in (*node.inputs, *node.outputs)])
                ds += own
            ds += sampler.encode([loaded.bindings[logits], slots, ring, sparse, mask, lp, tok[1 - i]])
            variants.append(ds)
        kinds: dict[tuple, tuple[list[int], Any]] = {}
        i = 0
        for kernel, own in zip(loaded.kernels, loaded.node_dispatches):
            if kernel.decode_groups(0) is not None and len(own) == 1:
                kinds.setdefault((kernel.cfg, kernel.window, kernel.n_blocks), ([], kernel))[0].append(i)
            i += len(own)
        sized = tuple((tuple(idx), kernel) for idx, kernel in kinds.values())
        pipe = self.dev.pipeline("next_params.wgsl", defines={"T": S})
        nxt = tuple([Dispatch(pipe, self.dev.bind_group(pipe, {1: (st, j * self._step_stride, Params.NBYTES),
                                                               2: self.dev.params_buffer,
                                                               3: loaded.inputs["positions"], 4: base}), (1, 1, 1))
                     for j in range(_MAX_BATCH)] for st in self._staging)
        n_sample = len(variants[0]) - sum(map(len, loaded.node_dispatches))
        res = _Resident(S, (variants[0], variants[1]), tok, slots, sparse, mask, lp, ring, base, readback, nb,
                        n_sample, sized, nxt)
        self._resident[key] = res
        return res

    def _sampler(self, plan: Plan, sampling: Any, nb: int, greedy: bool) -> tuple:
        """The sampler kernel for ``plan``'s logits ([S, V]) and its buffers: S, the two token buffers, slots,
        sparse entries, masks, logprob rows, the history ring, first positions, the two readbacks, kernel."""
        S, V = plan.outputs["logits"].shape
        spec = dict(sampling.spec)
        n_lp = int(spec["n_logprobs"])
        cap = self.n_ctx + 1
        tok = (self.dev.create_buffer(4 * S, label="tokens 0"), self.dev.create_buffer(4 * S, label="tokens 1"))
        words = sampling.slots.shape[1]
        slots = self.dev.create_buffer(4 * words * S, label="sampler slots")
        sparse = self.dev.create_buffer(8 * nb * S, label="sampler sparse")
        W = -(-V // 32)
        mask = self.dev.upload(np.full((S, W), -1, np.int32), label="sampler mask")
        lp = self.dev.create_buffer(S * _MAX_BATCH * (1 + n_lp) * 8, label="sampler logprobs")
        ring = self.dev.create_buffer(4 * S * cap, label="token ring")
        base = self.dev.create_buffer(4 * S, label="first positions")
        readback = tuple(self.dev.create_buffer(S * _MAX_BATCH * 4 + lp.size, _READBACK, f"token readback {i}")
                         for i in range(2))
        sampler = KERNELS["sample"](self.dev, {**spec, "greedy": greedy},
                                    [(S, V), (S, words), (S, cap), (S, nb, 2), (S, W),
                                     (S, _MAX_BATCH, 1 + n_lp, 2)],
                                    ["f32", "i32", "i32", "i32", "i32", "i32"], [(S,)])
        return S, tok, slots, sparse, mask, lp, ring, base, readback, sampler

    def _sampled_for(self, plan: Plan, sampling: Any) -> _Resident:
        """The sampler after a host step of ``plan`` (any plan with logits [S, V]; built once per kind of
        sampler): its dispatches read the plan's logits and write the ids into ``tok[1]`` and the ring."""
        nb, greedy = _sparse_slots(sampling), bool(sampling.greedy)
        key = (plan.key, nb, greedy, "sampled")
        if key in self._resident:
            return self._resident[key]
        loaded = self._loaded(plan)
        S, tok, slots, sparse, mask, lp, ring, base, readback, sampler = self._sampler(plan, sampling, nb, greedy)
        ds = sampler.encode([loaded.bindings[plan.outputs["logits"]], slots, ring, sparse, mask, lp, tok[1]])
        res = _Resident(S, (ds, ds), tok, slots, sparse, mask, lp, ring, base, readback, nb, len(ds))
        self._resident[key] = res
        return res

    def prepare_sampled(self, plan: Plan, sampling: Any) -> None:
        self._sampled_for(plan, sampling)

    def run_sampled(self, plan: Plan, step: Step, sampling: Any, contexts: Sequence[Sequence[int] | None]
                    ) -> tuple[list[int], np.ndarray | None]:
        """:meth:`run`, then the GPU sampler on the logits rows in the same queue: only the drawn ids cross the
        bus ([n_seqs]; and logprob rows [n_seqs, 1 + alternatives, 2] when asked), not [n_seqs, vocab] logits.

        ``sampling``: the runtime's ``SlotBatch`` of the plan's S logits rows (row s: sequence s of the step,
        history length ``len(contexts[s])``); ``contexts[s]``: sequence s's tokens, its newest evaluated by
        this step (None: a row that draws nothing, its id meaningless). On an "all" plan (every row's logits:
        a speculative verification) ``contexts`` may name each of the S rows instead: row r's tokens up to
        the one it evaluates. The ring gets the window the penalties read only where a slot has them."""
        res = self._sampled_for(plan, sampling)
        n = len(contexts)      # rows that draw: one per sequence, or every logits row of an "all" plan
        if sampling.slots.shape[0] != res.S or n not in (step.n_seqs, res.S):
            raise InvalidParameterError(f"the sampler's batch has {sampling.slots.shape[0]} slots and {n} "
                                        f"contexts for {step.n_seqs} sequences, the plan {res.S} logits rows")
        padded = step.padded_inputs(plan, self.n_ctx)
        loaded = self._loaded(plan)
        cap = self.n_ctx + 1
        pos0 = [len(c) - 1 if c else 0 for c in contexts]
        logprobs = bool(sampling.logprobs)
        with self.dev.step_lock:
            self._write_inputs(loaded, padded)
            self.dev.write_params(Params(pos=int(step.positions[0]), n_tokens=step.n_tokens, n_seqs=step.n_seqs))
            sparse = np.zeros((res.S, res.n_sparse, 2), np.uint32)
            sparse[:, :sampling.sparse.shape[1]] = sampling.sparse
            self.dev.write(res.slots, np.ascontiguousarray(sampling.slots, np.uint32))
            self.dev.write(res.sparse, sparse)
            if sampling.mask is not None:
                self.dev.write(res.mask, np.ascontiguousarray(sampling.mask, np.uint32))
            for s, (c, w) in enumerate(zip(contexts, _penalty_windows(sampling, n))):
                if c and w:           # the window the penalties read, at its positions (cap > any position)
                    w = min(w, len(c))
                    self.dev.write(res.ring, np.asarray(c[-w:], np.int32), 4 * (s * cap + len(c) - w))
            self._submit_step(loaded, pieces=step.n_tokens > 1)
            enc = self.dev.device.create_command_encoder()
            self.dev.encode(enc, res.variants[0])
            self._copy_ids(enc, res, n, pos0, 0, 1, 0, logprobs)
            index = self._submit(enc.finish())
            ids, rows = self._read_tokens(res, n, 0, 1, index, logprobs)
        lp = _lp_rows(rows, list(sampling.counters[:n]) or [0] * n, 0, 1, n)
        return ids[0], None if lp is None else lp[:, 0]


class DecodeStream:
    """The iterator :meth:`WgpuBackend.decode_batch` returns: batches of ids; ``stop()`` queues no more
    steps but lets the batch already queued come out; ``close()`` drops it."""

    def __init__(self) -> None:
        self.stopped = False
        self.gen: Iterator[tuple[list[list[int]], np.ndarray | None]] = iter(())

    def __iter__(self) -> DecodeStream:
        return self

    def __next__(self) -> tuple[list[list[int]], np.ndarray | None]:
        return next(self.gen)

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        self.gen.close()


def _sparse_slots(sampling: Any) -> int:
    """Sparse entries per slot of the sampler kernel for ``sampling``: its own, rounded up to a power of two
    (at least 16)."""
    return max(16, 1 << math.ceil(math.log2(max(1, sampling.sparse.shape[1]))))


def _penalty_windows(sampling: Any, n: int) -> list[int]:
    """Tokens of history the penalties of each of the first ``n`` slots read (0: no penalties)."""
    from ...runtime.sampling import slot_value
    out = []
    for row in sampling.slots[:n]:
        on = (slot_value(row, "repeat_penalty") != 1.0 or slot_value(row, "presence_penalty") != 0.0
              or slot_value(row, "frequency_penalty") != 0.0)
        out.append(int(slot_value(row, "penalty_last_n")) if on else 0)
    return out


def _lp_rows(rows: np.ndarray | None, counters: list[int], step: int, k: int, n: int) -> np.ndarray | None:
    """The logprob rows of ``k`` steps from ``step`` ([n, k, ...]) out of the readback's per-slot rows: the
    row of slot s's draw with counter c is c % _MAX_BATCH."""
    if rows is None:
        return None
    return np.stack([rows[s][[(counters[s] + step + j) % _MAX_BATCH for j in range(k)]] for s in range(n)])


def _describe(node: Node, in_types: Sequence[str]) -> str:
    """A node for error messages: name, op, input shapes and types, output shapes."""
    ins = ", ".join(f"{list(v.shape)} {t}" for v, t in zip(node.inputs, in_types))
    outs = ", ".join(str(list(v.shape)) for v in node.outputs)
    return f"node {node.name!r} (op {node.op}, inputs {ins} -> outputs {outs or 'none'})"


def _new_kinds_first(jobs: Sequence[tuple[Node, list[str], Any, bool]]) -> list[int]:
    """Job indices, the first node of each kind (op, attributes, shapes, types) before all the others.

    Nodes of one kind build the same pipelines, so only a kind's first node can compile. In plan order the
    workers take the next layers' nodes, which wait for the pipelines the first layer is compiling, and a
    new kind further on (a layer whose ffn_down is Q6_K, not Q4_K; the output matmul) waits behind them."""
    first: dict[str, int] = {}
    for i, (node, in_types, _, _) in enumerate(jobs):
        first.setdefault(repr((node.op, node.attrs, [v.shape for v in node.inputs], in_types,
                               [v.shape for v in node.outputs])), i)
    lead = set(first.values())
    return sorted(range(len(jobs)), key=lambda i: (i not in lead, i))


def _banks(plan: Plan) -> list[dict[Value, tuple[int, int]]]:
    """The plan's activations split over a few arena buffers, each value with its lifetime.

    wgpu forbids one buffer bound both read-only and read-write in a dispatch, even at disjoint ranges,
    so a node's outputs go to a buffer none of its inputs live in (the lowest such; three suffice when
    nodes read at most two activations). Each buffer is packed by liveness like the plan's own arena.
    """
    bank: dict[Value, int] = {}
    for node in plan.nodes:
        used = {bank[v] for v in node.inputs if v in bank}
        free = min(set(range(len(used) + 1)) - used)
        for v in node.outputs:
            bank[v] = free
    banks: list[dict[Value, tuple[int, int]]] = [{} for _ in range(max(bank.values(), default=-1) + 1)]
    for v, span in plan.live.items():
        banks[bank[v]][v] = span
    return banks


def _raw_weights(plan: Plan) -> set[Value]:
    """Weights the plan's kernels read as raw GGUF blocks (matmul and embed matrices)."""
    raw: set[Value] = set()
    other: set[Value] = set()
    for node in plan.nodes:
        for v, s in zip(node.inputs, slots_of(node)):
            if v.kind == "weight":
                (raw if s.raw else other).add(v)
    if raw & other:
        raise DeviceError(f"weights used both as matrices and as vectors: {sorted(v.name for v in raw & other)}")
    return raw
