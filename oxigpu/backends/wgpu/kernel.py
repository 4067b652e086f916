"""The kernel protocol: one :class:`OpKernel` subclass per IR op, a registry, checks and ``run_op``.

A kernel is built once per graph node (pipelines compiled in ``__init__``) and returns its dispatches
from ``encode`` (bind groups created there, once). Nothing in either runs per step.

Buffers and types, for every kernel:

- ``in_types[i]`` is ``"f32"`` or ``"i32"`` for activations, ``"f16"`` for the KV caches (state: IEEE
  halves, two per u32, see shaders/common/half.wgsl), and the quant type name (``"Q4_K"``, ``"F16"``,
  ``"F32"`` ...) for weights, whose buffers hold the raw GGUF rows;
  ``in_shapes`` are logical shapes (a weight is ``[rows, cols]`` in elements, not bytes);
- ``encode(buffers)`` gets the node's inputs then its outputs, each a GPUBuffer or a
  ``(buffer, offset, size)`` range; the per-step :class:`~.device.Params` live in ``dev.params_buffer``.

Checks (``CHECKS``) are what ``oxigpu kernels`` and the tests run: each registered function yields
:class:`Case` objects holding host inputs and a float64 reference.
"""
from __future__ import annotations

import fnmatch
import importlib
import math
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...errors import DeviceError
from ...graph.ir import OPS, input_slots
from ...quant import kvcache as kvq
from .device import Binding, Device, Dispatch, Params
from .layout import gpu_layout

Shape = tuple[int, ...]


class OpKernel:
    """Base class: subclasses set ``op``, compile in ``__init__`` and implement ``encode``."""

    op: ClassVar[str] = ""

    def __init__(self, dev: Device, attrs: dict[str, Any], in_shapes: Sequence[Shape],
                 in_types: Sequence[str], out_shapes: Sequence[Shape]):
        self.dev = dev
        self.attrs = dict(attrs)
        self.in_shapes = [tuple(s) for s in in_shapes]
        self.in_types = list(in_types)
        self.out_shapes = [tuple(s) for s in out_shapes]

    @classmethod
    def output_shapes(cls, in_shapes: Sequence[Shape], attrs: dict[str, Any]) -> list[Shape]:
        """Output shapes for these inputs (for ``run_op``; the graph builder checks the same rules)."""
        return [tuple(in_shapes[0])]

    def encode(self, buffers: Sequence[Binding]) -> list[Dispatch]:
        raise NotImplementedError

    def as_computed(self, case: Case) -> Case:
        """``case`` as this kernel computes it: a kernel whose arithmetic rounds by design (the matrix-unit
        GEMM's f16 products) returns the case whose reference rounds the same way, so a check holds it to
        what it computes rather than to a bound loose enough for every path; most kernels return ``case``."""
        return case

    deep: OpKernel | None = None
    """A variant for steps whose keys reach ``deep_keys`` or more (the matrix-unit prefill attention, where
    the FMA kernel serves short contexts better): the backend submits its dispatches for those steps."""
    deep_keys: int = 0

    def decode_groups(self, pos: int) -> int | None:
        """Workgroups a one-row decode step at ``pos`` needs where the kernel can launch fewer than its whole
        grid there (the GPU-resident loop sizes its dispatches so); None: the grid stays whole."""
        return None

    @property
    def writes(self) -> tuple[int, ...]:
        """Indices of inputs the kernel writes in place (the states its op's spec marks written in
        graph/ir.py's ``OPS``: ``kv_store``'s caches, ``sample``'s history ring)."""
        n = len(self.in_shapes)
        try:
            slots = input_slots(self.op, self.attrs, n)
        except ValueError:   # interim: kernels on a contiguous cache take no positions/row_seq/block_table
            paged = [s.name for s in OPS[self.op].slots if s.name in ("positions", "row_seq", "block_table")]
            slots = tuple(s for s in input_slots(self.op, self.attrs, n + len(paged)) if s.name not in paged)
        return tuple(i for i, s in enumerate(slots) if s.writes)


KERNELS: dict[str, type[OpKernel]] = {}
"""IR op name -> kernel class; filled by the modules of ``oxigpu.backends.wgpu.ops``."""


def register(cls: type[OpKernel]) -> type[OpKernel]:
    """Class decorator: make ``cls`` the kernel for ``cls.op``."""
    if cls.op in KERNELS and KERNELS[cls.op] is not cls:
        raise DeviceError(f"two kernels registered for op {cls.op!r}: {KERNELS[cls.op]} and {cls}")
    KERNELS[cls.op] = cls
    return cls


def load_kernels() -> dict[str, type[OpKernel]]:
    """Import every module under ``oxigpu.backends.wgpu.ops`` so their kernels and checks register."""
    from . import ops
    for mod in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{mod.name}")
    return KERNELS


@dataclass
class Case:
    """One kernel check: host inputs, the float64 expectation and the error allowed.

    ``reference()`` returns the expected results in ``run_op``'s order (outputs, then written inputs).
    ``tol`` bounds each result's :func:`rel_error`, or is one bound per result. ``pos``, ``n_tokens`` and
    ``n_seqs`` are the step's parameters (:meth:`params`). ``nbytes`` / ``flops`` describe one run, for
    ``--bench``.
    """

    op: str
    name: str
    inputs: list[np.ndarray]
    in_types: list[str]
    reference: Callable[[], list[np.ndarray]]
    tol: float | tuple[float, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    pos: int = 0
    n_tokens: int | None = None
    nbytes: int = 0
    flops: int = 0
    n_seqs: int = 1

    def params(self) -> Params:
        """The step parameters the case runs with (n_tokens: all rows of the first input unless given)."""
        rows = self.inputs[0].shape[0] if np.ndim(self.inputs[0]) else 1
        return Params(pos=self.pos, n_tokens=rows if self.n_tokens is None else self.n_tokens, n_seqs=self.n_seqs)


CHECKS: dict[str, Callable[[], Iterable[Case]]] = {}
"""Check name -> generator of cases (fixed seeds, so every run tests the same data)."""

BENCH_ONLY: set[str] = set()
"""Checks at benchmark sizes: run by ``oxigpu kernels --bench`` only (too slow for every test run)."""


def check(name: str, bench: bool = False) -> Callable[[Callable[[], Iterable[Case]]], Callable[[], Iterable[Case]]]:
    """Decorator registering a case generator under ``name`` (e.g. ``"matmul"``); ``bench`` marks
    benchmark-size checks."""
    def deco(fn: Callable[[], Iterable[Case]]) -> Callable[[], Iterable[Case]]:
        CHECKS[name] = fn
        if bench:
            BENCH_ONLY.add(name)
        return fn
    return deco


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want|: scale-aware, stable where single elements are near zero."""
    want = np.asarray(want, np.float64)
    diff = np.abs(np.asarray(got, np.float64) - want)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(diff.max() / max(np.abs(want).max(), 1e-30)) if want.size else 0.0


def case_error(case: Case, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> tuple[float, float]:
    """(error, bound) of the result with the largest error relative to its bound in ``case.tol``."""
    if len(got) != len(want):
        raise AssertionError(f"{case.name}: kernel returned {len(got)} results, reference {len(want)}")
    tols = case.tol if isinstance(case.tol, tuple) else (case.tol,) * len(want)
    pairs = [(rel_error(g, w), t) for g, w, t in zip(got, want, tols)]
    return max(pairs, key=lambda p: p[0] / p[1] if p[1] else (math.inf if p[0] else 0.0), default=(0.0, 0.0))


HOST_TYPES = {"f32": np.float32, "i32": np.int32, "f16": np.float16}
"""numpy dtypes of the buffers of activation and state types."""


@dataclass
class Prepared:
    """A kernel bound to freshly uploaded buffers: what ``run_op`` and the benchmarks share."""

    kernel: OpKernel
    in_bufs: list[Any]
    out_bufs: list[Any]
    out_shapes: list[Shape]
    dispatches: list[Dispatch]


def logical_shape(arr: np.ndarray, dtype: str) -> Shape:
    """Shape in elements: raw quantized rows ``(..., row_bytes)`` become ``(..., cols)``."""
    if dtype in HOST_TYPES:
        return tuple(arr.shape)
    from ...quant import get_type
    return tuple(arr.shape[:-1]) + (get_type(dtype).n_cols(arr.shape[-1]),)


def prepare(op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None,
            in_types: Sequence[str] | None = None, dev: Device | None = None) -> Prepared:
    """Build the kernel for ``op``, upload ``inputs``, allocate NaN-poisoned outputs, encode."""
    dev = dev or Device.get()
    attrs = dict(attrs or {})
    if op not in KERNELS:
        load_kernels()
    if op not in KERNELS:
        raise DeviceError(f"no wgpu kernel for op {op!r} (have {sorted(KERNELS)})")
    cls = KERNELS[op]
    types = list(in_types) if in_types is not None else \
        ["i32" if np.asarray(a).dtype.kind in "iu" else "f16" if np.asarray(a).dtype == np.float16 else "f32"
         for a in inputs]
    shapes = [logical_shape(np.asarray(a), t) for a, t in zip(inputs, types)]
    out_shapes = cls.output_shapes(shapes, attrs)
    kernel = cls(dev, attrs, shapes, types, out_shapes)
    in_bufs = [dev.upload(_host(a, t), label=f"{op}.in{i}") for i, (a, t) in enumerate(zip(inputs, types))]
    out_bufs = []
    for i, s in enumerate(out_shapes):
        out_bufs.append(dev.upload(np.full(s, np.nan, np.float32), label=f"{op}.out{i}"))
    return Prepared(kernel, in_bufs, out_bufs, out_shapes, kernel.encode(in_bufs + out_bufs))


def run_op(op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any] | None = None, pos: int = 0,
           n_tokens: int | None = None, in_types: Sequence[str] | None = None,
           dev: Device | None = None, n_seqs: int = 1) -> list[np.ndarray]:
    """Run one op on the GPU and read the results back (test helper; allocates every call).

    Returns the outputs, then the final contents of the inputs the kernel writes (``writes``).
    """
    dev = dev or Device.get()
    p = prepare(op, inputs, attrs, in_types, dev)
    rows = inputs[0].shape[0] if np.ndim(inputs[0]) else 1
    dev.write_params(Params(pos=pos, n_tokens=rows if n_tokens is None else n_tokens, n_seqs=n_seqs))
    dev.submit(p.dispatches)
    outs = [dev.read(b, np.float32, s) for b, s in zip(p.out_bufs, p.out_shapes)]
    return outs + read_written(p, dev)


def run_case(case: Case, dev: Device | None = None) -> list[np.ndarray]:
    """:func:`run_op` of a check case with its step parameters."""
    return run_op(case.op, case.inputs, case.attrs, case.pos, case.n_tokens, case.in_types, dev, case.n_seqs)


def read_written(p: Prepared, dev: Device) -> list[np.ndarray]:
    """The final contents of the inputs ``p``'s kernel writes: f16 caches as float16, quantized ones as their
    bytes (uint8 rows), the rest as float32 (views of i32 data, as outputs are read)."""
    k = p.kernel
    return [dev.read(p.in_bufs[i], np.float16, k.in_shapes[i]) if k.in_types[i] == "f16"
            else dev.read(p.in_bufs[i], np.uint8, (k.in_shapes[i][0], kvq.row_bytes(k.in_types[i], k.in_shapes[i][1])))
            if k.in_types[i] in kvq.KV_TYPES else dev.read(p.in_bufs[i], np.float32, k.in_shapes[i])
            for i in k.writes]


def _host(a: np.ndarray, dtype: str) -> np.ndarray:
    """An input's bytes as the kernels read them (quantized weights in the GPU's block layout)."""
    return gpu_layout(np.asarray(a).astype(HOST_TYPES.get(dtype, np.uint8), copy=False), dtype)


def matches(pattern: str | None, text: str) -> bool:
    """``pattern`` (case-insensitive) as a glob where it has one of ``*?[``, else as a substring, in ``text``."""
    if not pattern:
        return True
    pat = pattern if any(ch in pattern for ch in "*?[") else f"*{pattern}*"
    return fnmatch.fnmatch(text.lower(), pat.lower())


@dataclass
class KernelSource:
    """One pipeline a kernel builds: its shader file, entry point, defines and assembled WGSL, and the
    first check case (``"check case"``) whose kernel builds it."""

    file: str
    entry: str
    defines: dict[str, Any]
    source: str
    case: str


def kernel_sources(pattern: str, dev: Device, implementation: str | None = None) -> list[KernelSource]:
    """The distinct pipelines built by the kernels of the registered check cases (benchmark ones
    included) whose ``"check case"`` text, or one of whose ``file:entry`` names, matches ``pattern``
    (:func:`matches`): their WGSL after ``#include`` and ``{{DEFINES}}`` expansion, for this device (its
    limits and features pick the tiles, as in a model; ``implementation``: the WebGPU implementation whose
    source to write, Device.shader_source). Nothing is compiled."""
    load_kernels()
    seen: dict[tuple, KernelSource] = {}
    for bench in (False, True):     # benchmark-size cases only where no other case matches
        if seen:
            break
        for check_name, gen in CHECKS.items():
            if (check_name in BENCH_ONLY) != bench:
                continue
            for case in gen():
                _record_case(dev, pattern, f"{check_name} {case.name}", case, seen, implementation)
    return list(seen.values())


def _record_case(dev: Device, pattern: str, label: str, case: Case, seen: dict[tuple, KernelSource],
                 implementation: str | None) -> None:
    cls = KERNELS[case.op]
    shapes = [logical_shape(np.asarray(a), t) for a, t in zip(case.inputs, case.in_types)]
    with dev.recording() as rec:
        try:
            cls(dev, dict(case.attrs), shapes, list(case.in_types), cls.output_shapes(shapes, case.attrs))
        except (DeviceError, ValueError):   # a case this device cannot build (e.g. matrix units asked for)
            return
    for file, entry, defines in rec:
        if not (matches(pattern, label) or matches(pattern, f"{file}:{entry}")):
            continue
        key = (file, entry, tuple(sorted((k, str(v)) for k, v in defines.items())))
        if key not in seen:
            seen[key] = KernelSource(file, entry, defines, dev.shader_source(file, defines, implementation), label)
