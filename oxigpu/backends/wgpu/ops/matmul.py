"""``matmul`` (y = x @ W.T + bias) on quantized GGUF weights: GEMV for one row, tiled GEMM for more.

Both shaders read the raw GGUF blocks through the same ``shaders/quant/<type>.wgsl`` snippet. A weight
larger than the device's storage-binding limit is bound as several row ranges of the same buffer, one
dispatch each; every range writes its own output columns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from ....errors import DeviceError
from ....quant import dequantize, get_type, quantize
from ..device import Binding, Device, Dispatch, workgroups_for
from ..kernel import Case, OpKernel, Shape, check, register

GEMM_BM, GEMM_BN = 32, 64   # must match gemm_q.wgsl

TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
"""Weight types with a WGSL dequant snippet."""


GEMV_PIECES = {"F32": "f32", "F16": "f16", "Q8_0": "q8_0", "Q4_0": "q4_0", "Q5_0": "q5_0",
               "Q4_K": "q4_k", "Q6_K": "q6_k"}
"""Types with a specialized GEMV piece file (shaders/gemv/<name>.wgsl); the rest use the dq8 one."""


@dataclass(frozen=True)
class GemvConfig:
    """How the GEMV splits work: TPR lanes per group of R rows, GPW groups per workgroup.

    ``piece`` names shaders/gemv/<piece>.wgsl; ``ppb32`` is the pieces per 32-element block of the
    Q4_0/Q5_0/Q8_0 piece files; ``magic`` converts small ints to f32 by exponent bits (gemv/common.wgsl).
    """

    tpr: int = 32
    r: int = 2
    gpw: int = 4
    piece: str = ""
    ppb32: int = 1
    magic: bool = True


def gemv_config(qtype: str, k: int, n: int) -> GemvConfig:
    """The GEMV split for a weight of n rows of k elements (H100 sweep: BENCHMARKS.md, GEMV section).

    Quantized rows share each x load over R rows (R = 4 wins at large n for every quant type); below
    8192 rows there are too few lanes to cover the GPU's 132 SMs at R = 4 and 32 lanes per group, so
    long rows (>= 256 pieces) get 64 lanes per group and short rows R = 2; below 3200 rows (Qwen2.5-0.5B's
    896) R = 1. Float rows are cheap to convert, so they take one row per group. Every split chosen
    here was measured on the H100 at the shapes in bench_gemv.py.
    """
    piece = GEMV_PIECES.get(qtype, "dq8")
    if qtype in ("F32", "F16", "BF16"):
        tpr = 32 if n >= 2048 else 64
        return GemvConfig(tpr=tpr, r=1, gpw=128 // tpr, piece=piece)
    cfg = GemvConfig(piece=piece, ppb32=2)
    qt = get_type(qtype)
    pieces = k // qt.block_size * (cfg.ppb32 if qt.block_size == 32 else 8)
    if n >= 8192:
        r, tpr = 4, 32
    elif n >= 3200:
        r, tpr = (4, 64) if pieces >= 256 else (2, 32)
    else:
        r, tpr = 1, 32
    return replace(cfg, tpr=tpr, r=r, gpw=128 // tpr)


def split_rows(n_rows: int, row_bytes: int, limit: int, align: int) -> list[tuple[int, int]]:
    """(first row, row count) ranges whose bytes fit one binding and start at aligned offsets."""
    step = align // math.gcd(row_bytes, align)            # rows per aligned offset
    per = ((limit - 4) // row_bytes) // step * step       # -4: the tail is rounded up to a word
    if per <= 0:
        raise DeviceError(f"{step} weight rows of {row_bytes} B (the fewest that keep binding offsets "
                          f"{align}-aligned) exceed the storage-binding limit {limit} B")
    return [(r, min(per, n_rows - r)) for r in range(0, n_rows, per)]


@register
class MatmulKernel(OpKernel):
    """Inputs x[R, k] f32, W[n, k] (any of :data:`TYPES`), optional bias[n] f32; output y[R, n]."""

    op = "matmul"

    def __init__(self, dev: Device, attrs: dict[str, Any], in_shapes: Sequence[Shape],
                 in_types: Sequence[str], out_shapes: Sequence[Shape]):
        super().__init__(dev, attrs, in_shapes, in_types, out_shapes)
        (self.m, self.k), (self.n, _) = self.in_shapes[0], self.in_shapes[1]
        self.qt = get_type(in_types[1])
        if self.qt.name not in TYPES:
            raise DeviceError(f"matmul: no WGSL dequant snippet for weight type {self.qt.name}")
        if self.k % 8:
            raise DeviceError(f"matmul: inner dimension {self.k} is not a multiple of 8")
        self.row_bytes = self.qt.row_bytes(self.k)
        self.has_bias = len(in_shapes) > 2
        self.ranges = split_rows(self.n, self.row_bytes, dev.max_storage_binding, dev.storage_align)
        defines = {"QUANT": self.qt.name.lower(), "HAS_BIAS": self.has_bias}
        if self.m == 1:
            cfg = gemv_config(self.qt.name, self.k, self.n)
            if "gemv" in attrs:                 # tests and benchmarks: override fields of the choice
                cfg = replace(cfg, **attrs["gemv"])
            if cfg.r not in (1, 2, 4, 8) or cfg.tpr & (cfg.tpr - 1) or cfg.tpr * cfg.gpw > 256:
                raise DeviceError(f"matmul: unsupported GEMV split {cfg}")
            self.gemv = cfg
            defines |= {"TPR": cfg.tpr, "R": cfg.r, "GPW": cfg.gpw, "PIECE": cfg.piece or "dq8",
                        "PPB32": cfg.ppb32, "MAGIC": cfg.magic,
                        "REDUCE": "sg" if dev.has_subgroups else "wg"}
            self.pipe = dev.pipeline("gemv_q.wgsl", defines=defines)
        else:
            self.pipe = dev.pipeline("gemm_q.wgsl", defines=defines)

    @classmethod
    def output_shapes(cls, in_shapes: Sequence[Shape], attrs: dict[str, Any]) -> list[Shape]:
        return [(in_shapes[0][0], in_shapes[1][0])]

    def encode(self, buffers: Sequence[Binding]) -> list[Dispatch]:
        x, w, y = buffers[0], buffers[1], buffers[-1]
        bias = buffers[2] if self.has_bias else x       # unused binding when there is no bias
        wbuf, wbase = (w[0], w[1]) if isinstance(w, tuple) else (w, 0)
        out = []
        for row0, rows in self.ranges:
            off = wbase + row0 * self.row_bytes
            size = min((rows * self.row_bytes + 3) // 4 * 4, wbuf.size - off)
            dims = self.dev.uniform([self.k, self.n, rows, row0, self.row_bytes, self.m, 0, 0])
            binds = {1: dims, 2: x, 3: (wbuf, off, size), 4: bias, 5: y}
            if self.m == 1:
                binds[6] = (wbuf, off, size)    # the same bytes as array<vec4<u32>>
                grid = workgroups_for(-(-rows // (self.gemv.r * self.gemv.gpw)))
            else:
                grid = (-(-rows // GEMM_BN), -(-self.m // GEMM_BM), 1)
            bg = self.dev.bind_group(self.pipe, binds)
            out.append(Dispatch(self.pipe, bg, grid))
        return out


def matmul_case(qtype: str, m: int, k: int, n: int, bias: bool, seed: int = 0, distinct_rows: int = 0) -> Case:
    """A random matmul check: weights quantized from N(0, 1), x ~ N(0, 1), float64 reference.

    ``distinct_rows`` > 0 quantizes only that many rows and tiles them (benchmark sizes stay cheap).
    Decode-shaped cases (m == 1) report GB/s, prefill-shaped ones GFLOP/s.
    """
    rng = np.random.default_rng(seed)
    qt = get_type(qtype)
    raw = quantize(rng.standard_normal((distinct_rows or n, k), np.float32), qt)
    if distinct_rows:
        raw = np.tile(raw, (-(-n // distinct_rows), 1))[:n]
    x = rng.standard_normal((m, k)).astype(np.float32)
    ins = [x, raw] + ([rng.standard_normal(n).astype(np.float32)] if bias else [])

    def reference() -> list[np.ndarray]:
        y = x.astype(np.float64) @ dequantize(raw, qt).astype(np.float64).T
        return [y + ins[2] if bias else y]

    return Case("matmul", f"{qt.name} {m}x{k} @ {n}x{k}{' +bias' if bias else ''}", ins,
                ["f32", qt.name] + (["f32"] if bias else []), reference, tol=2e-7 * math.sqrt(k),
                nbytes=raw.nbytes + 4 * (k + n) if m == 1 else 0, flops=2 * m * n * k if m > 1 else 0)


@check("matmul")
def matmul_checks() -> list[Case]:
    """GEMV (R = 1) and GEMM (R = 3, 17) for every weight type, rows not multiples of the tiles."""
    cases = []
    for i, t in enumerate(TYPES):
        blk = max(get_type(t).block_size, 32)
        k = 640 if blk == 32 else 1024
        cases.append(matmul_case(t, 1, k, 67, bias=False, seed=i))
        cases.append(matmul_case(t, 1, k + 2 * blk, 130, bias=True, seed=100 + i))
        cases.append(matmul_case(t, 3, k, 70, bias=True, seed=200 + i))
        cases.append(matmul_case(t, 17, k + blk, 129, bias=False, seed=300 + i))
    return cases


@check("matmul.bench", bench=True)
def matmul_bench() -> list[Case]:
    """Llama-3.2-1B-shaped decode GEMVs (FFN up and down) and a 128-token prefill GEMM."""
    cases = []
    for i, t in enumerate(("F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")):
        cases.append(matmul_case(t, 1, 2048, 8192, bias=False, seed=i, distinct_rows=256))
        cases.append(matmul_case(t, 1, 8192, 2048, bias=False, seed=i, distinct_rows=256))
    for i, t in enumerate(("F16", "Q8_0", "Q4_K")):
        cases.append(matmul_case(t, 128, 2048, 2048, bias=False, seed=i, distinct_rows=256))
    return cases
