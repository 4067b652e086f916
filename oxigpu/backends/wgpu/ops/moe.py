"""Mixture-of-experts kernels: routing (moe_gate), the chosen experts' products (matmul_id) and their
weighted sum (moe_sum).

``matmul_id`` reads only the chosen experts' weights, as llama.cpp's ``mul_mat_id`` does. A decode step
(T == 1) is one GEMV dispatch over every (token, slot) pair; a prefill chunk is grouped by expert first
(``route``: one workgroup counts, orders and tiles the pairs on the GPU) so a grouped GEMM reads each
chosen expert's weight tile once per 16 pairs. Weights are dequantized with the shared quant snippets.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ....quant import dequantize, get_type, quantize
from ...numpy_ops import matmul_id as matmul_id_ref
from ...numpy_ops import moe_gate as moe_gate_ref
from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import f32_lit, grid, rng
from .quant_grid import grid_binds

GEMM_TM, GEMM_TN, GEMM_BK = 16, 64, 32      # matmul_id_gemm.wgsl's tile


@register
class MoeGate(OpKernel):
    op = "moe_gate"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], attrs["k"])] * 2

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.T, E = self.in_shapes[0]
        self.pipe = self.dev.pipeline("moe.wgsl", "gate", {
            "T": self.T, "E": E, "KSEL": self.attrs["k"], "NORM": int(bool(self.attrs["norm"])),
            "W_SCALE": f32_lit(self.attrs.get("w_scale", 1.0)), "N": 1})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        logits, ids, w = buffers
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: logits, 3: ids, 4: w})
        return [Dispatch(self.pipe, bg, grid(self.T, 64))]


@register
class MoeSum(OpKernel):
    op = "moe_sum"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], in_shapes[0][1] // in_shapes[1][1])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        T, K = self.in_shapes[1]
        self.n = T * self.out_shapes[0][1]
        self.pipe = self.dev.pipeline("moe.wgsl", "sum", {
            "T": T, "E": 1, "KSEL": K, "NORM": 0, "W_SCALE": "1.0", "N": self.out_shapes[0][1]})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        y, w, out = buffers
        bg = self.dev.bind_group(self.pipe, {1: y, 2: w, 4: out})
        return [Dispatch(self.pipe, bg, grid(self.n, 64))]


@register
class MatmulId(OpKernel):
    op = "matmul_id"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], in_shapes[2][1] * in_shapes[1][1])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        (self.T, kx), (E, N, K_in), (_, K) = self.in_shapes[0], self.in_shapes[1], self.in_shapes[2]
        qt = get_type(self.in_types[1])
        if K_in % qt.block_size or K_in % 8:
            raise ValueError(f"matmul_id: rows of {K_in} are not whole {qt.name} blocks")
        self.pairs, self.N = self.T * K, N
        self.grid = grid_binds(self.dev, qt.name)      # the IQ types' lookup table (ops/quant_grid.py)
        common = {"QUANT": qt.wgsl_file[:-5], "K_IN": K_in, "N": N, "E": E, "KSEL": K,
                  "XSLOT": int(kx == K * K_in)}
        self.grouped = self.T > 1 and K_in % GEMM_BK == 0
        if self.grouped:
            self.max_tiles = 2 * -(-self.pairs // GEMM_TM) + min(E, self.pairs)   # + the padding's tiles
            order_at = 1 + 3 * self.max_tiles
            defs = {**common, "T": self.T, "MAX_TILES": self.max_tiles, "ORDER_AT": order_at}
            self.route = self.dev.pipeline("matmul_id_gemm.wgsl", "route", defs)
            self.gemm = self.dev.pipeline("matmul_id_gemm.wgsl", "gemm", defs)
            self.table = self.dev.create_buffer(4 * (order_at + self.pairs), label="matmul_id.route")
        else:
            red = "sg" if self.dev.has_subgroups else "wg"
            self.rows = 4
            self.pipe = self.dev.pipeline("matmul_id.wgsl", "main", {**common, "WG": 64, "ROWS": self.rows,
                                                                     "RED": red})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        x, w, ids, y = buffers
        if not self.grouped:
            bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: x, 2: w, 3: ids, 4: y, **self.grid})
            return [Dispatch(self.pipe, bg, (-(-self.N // self.rows), self.pairs, 1))]
        binds = {0: self.dev.params_buffer, 1: x, 2: w, 3: ids, 4: y, 5: self.table}
        route = self.dev.bind_group(self.route, {k: v for k, v in binds.items() if k in (0, 3, 5)})
        gemm = self.dev.bind_group(self.gemm, {**{k: v for k, v in binds.items() if k not in (0, 3)}, **self.grid})
        return [Dispatch(self.route, route, (1, 1, 1)),
                Dispatch(self.gemm, gemm, (-(-self.N // GEMM_TN), self.max_tiles, 1))]


def _moe_case(name: str, qtype: str, T: int, n_tokens: int, E: int, K: int, N: int, K_in: int,
              per_slot: bool, seed: int) -> Case:
    g = rng(seed)
    raw = quantize((g.standard_normal((E * N, K_in)) * 0.5).astype(np.float32), qtype)
    ids = np.stack([g.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
    if T > 2:
        ids[1] = ids[0]                  # several pairs on one expert, and experts nobody picked
    x = g.standard_normal((T, (K if per_slot else 1) * K_in)).astype(np.float32)

    def ref():
        wf = dequantize(raw, qtype).reshape(E, N, K_in).astype(np.float64)
        return [matmul_id_ref(x.astype(np.float64), wf, ids, n_tokens=n_tokens)]
    return Case("matmul_id", name, [x, raw.reshape(E, N, -1), ids], ["f32", qtype, "i32"], ref, 2e-5,
                n_tokens=n_tokens, nbytes=len(np.unique(ids[:n_tokens])) * N * raw.shape[1])


@check("moe")
def _cases() -> Iterable[Case]:
    g = rng(41)
    for T, n, E, K, norm, scale in ((1, 1, 8, 2, True, 1.0), (5, 3, 16, 4, False, 2.5), (7, 7, 128, 8, True, 1.0)):
        logits = g.standard_normal((T, E)).astype(np.float32) * 3
        logits[0, 1] = logits[0, 0]       # a tie: the lower id first

        def ref(logits=logits, k=K, norm=norm, scale=scale, n=n):
            ids, w = moe_gate_ref(logits.astype(np.float64), k=k, norm=norm, w_scale=scale, n_tokens=n)
            return [ids.astype(np.int32).view(np.float32), w]   # i32 outputs come back as f32 views
        yield Case("moe_gate", f"moe_gate T={T} n_tokens={n} E={E} K={K} norm={norm} scale={scale}",
                   [logits], ["f32"], ref, (0.0, 2e-6), attrs={"k": K, "norm": norm, "w_scale": scale},
                   n_tokens=n)
    y = g.standard_normal((3, 4 * 100)).astype(np.float32)
    w = g.random((3, 4)).astype(np.float32)
    yield Case("moe_sum", "moe_sum T=3 K=4 n=100", [y, w], ["f32", "f32"],
               lambda: [np.einsum("tjn,tj->tn", y.astype(np.float64).reshape(3, 4, 100), w)], 1e-6)
    # decode GEMVs (T == 1) and grouped prefill GEMMs, x shared by the slots or one block per slot
    yield _moe_case("matmul_id GEMV Q4_K E=8 K=2 N=96 k=256", "Q4_K", 1, 1, 8, 2, 96, 256, False, 1)
    yield _moe_case("matmul_id GEMV Q8_0 E=16 K=4 N=64 k=96 per-slot x", "Q8_0", 1, 1, 16, 4, 64, 96, True, 2)
    yield _moe_case("matmul_id GEMV F16 E=4 K=2 N=33 k=40", "F16", 1, 1, 4, 2, 33, 40, False, 3)
    yield _moe_case("matmul_id GEMM Q4_K T=20 n_tokens=17 E=8 K=2 N=130 k=512", "Q4_K", 20, 17, 8, 2, 130, 512,
                    False, 4)
    yield _moe_case("matmul_id GEMM Q6_K T=9 E=16 K=4 N=64 k=256 per-slot x", "Q6_K", 9, 9, 16, 4, 64, 256, True, 5)
    yield _moe_case("matmul_id GEMM Q5_0 T=40 E=64 K=8 N=70 k=96", "Q5_0", 40, 40, 64, 8, 70, 96, False, 6)
    yield _moe_case("matmul_id GEMM F32 T=6 E=3 K=3 N=65 k=64", "F32", 6, 6, 3, 3, 65, 64, False, 7)
