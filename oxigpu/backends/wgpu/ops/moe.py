"""Mixture-of-experts kernels: routing (moe_gate), the chosen experts' products (matmul_id) and their
weighted sum (moe_sum).

``matmul_id`` reads only the chosen experts' weights, as llama.cpp's ``mul_mat_id`` does. A decode step
(T == 1) is one GEMV dispatch over every (token, slot) pair; a prefill chunk is grouped by expert first
(``route``: one workgroup counts, orders and tiles the pairs on the GPU) so a grouped GEMM reads each
chosen expert's weight tile once per 16 pairs. Weights are dequantized with the shared quant snippets.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from ....quant import dequantize, get_type, quantize
from ....quant.samples import random_blocks
from ...numpy_ops import matmul_id as matmul_id_ref
from ...numpy_ops import moe_gate as moe_gate_ref
from ..device import Binding, DeviceError, Dispatch, workgroups_for
from ..kernel import Case, OpKernel, check, register
from ._common import f32_lit, grid, rng
from .elementwise import Glu
from .gemm import GemmKernel, q8_round, q8_tie_free, scratch_buffer
from .matmul import Gemv, glu64, q8x_round, split_rows, word_span

MAX_EXPERTS = 1024
"""Experts a router may have (as models/hparams.py bounds them): the gate keeps each token's logits, their
exponentials and the picks in workgroup memory (12 KiB at most, under WebGPU's 16 KiB default)."""


def _route_defines(dev, T: int, E: int, attrs: dict, **route) -> dict:
    """moe_route.wgsl's defines; ``route``: D, RPW, EPS, WF16 for the ``route`` entry."""
    if not 1 <= attrs["k"] <= E or E > MAX_EXPERTS:
        raise ValueError(f"moe routing: {E} experts, {attrs['k']} chosen (1 to {MAX_EXPERTS} experts, 1 to all chosen)")
    wg = 64 if E <= 64 else 128 if E <= 128 else 256
    return {"T": T, "E": E, "KSEL": attrs["k"], "NORM": int(bool(attrs["norm"])), "WG": wg,
            "W_SCALE": f32_lit(attrs.get("w_scale", 1.0)), "RED": "sg" if dev.has_subgroups else "wg",
            "D": 8, "RPW": 1, "EPS": f32_lit(0.0), "WF16": 0, "GATE": 1} | route


@register
class MoeGate(OpKernel):
    """``moe_gate``: a workgroup per token row ranks each expert against the row's logits (moe_route.wgsl)."""

    op = "moe_gate"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], attrs["k"])] * 2

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.T, E = self.in_shapes[0]
        self.pipe = self.dev.pipeline("moe_route.wgsl", "gate", _route_defines(self.dev, self.T, E, self.attrs))

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        logits, ids, w = buffers
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 7: logits, 3: ids, 4: w})
        return [Dispatch(self.pipe, bg, workgroups_for(self.T))]     # a workgroup per token row


@register
class MoeRoute(OpKernel):
    """``moe_route`` (decode): the FFN's RMS norm, the router GEMV (F32/F16 weights) and the gate in one
    dispatch: per token ceil(E / RPW) workgroups of RPW router rows each (about 32 a token), the token's
    last one to finish picking the experts from the logits the others stored."""

    op = "moe_route"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        T, d = in_shapes[0]
        return [(T, d), (T, attrs["k"]), (T, attrs["k"])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        (self.T, d), (E, _) = self.in_shapes[0], self.in_shapes[1]
        if d % 8 or self.in_types[1] not in ("F32", "F16"):
            raise ValueError(f"moe_route: rows of {d} ({self.in_types[1]}): needs F32/F16 and a multiple of 8")
        # attrs["route"]: benchmarks override the rows per workgroup (rpw), the lanes (wg) or leave the gate
        # out (gate: 0)
        over = self.attrs.get("route", {})
        rpw = over.get("rpw", max(1, min(8, E // 32)))
        self.groups = self.T * -(-E // rpw)
        self.pipe = self.dev.pipeline("moe_route.wgsl", "route", _route_defines(
            self.dev, self.T, E, self.attrs, D=d, RPW=rpw, EPS=f32_lit(self.attrs["eps"]),
            WF16=int(self.in_types[1] == "F16"), GATE=over.get("gate", 1), **{k.upper(): over[k] for k in over
                                                                               if k == "wg"}))
        self.logits = self.dev.create_buffer(4 * self.T * E, label="moe_route logits")
        self.counters = self.dev.create_buffer(4 * self.T, label="moe_route counters")   # zero-filled

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        x, wr, g, h, ids, w = buffers
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: x, 2: wr, 3: ids, 4: w, 5: g, 6: h,
                                             7: self.logits, 8: self.counters})
        return [Dispatch(self.pipe, bg, workgroups_for(self.groups))]


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
            "T": T, "KSEL": K, "N": self.out_shapes[0][1],
            "HAS_RES": self.op == "moe_sum_add"})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        y, w, *res, out = buffers
        bg = self.dev.bind_group(self.pipe, {1: y, 2: w, 4: out, 5: res[0] if res else y})
        return [Dispatch(self.pipe, bg, grid(self.n, 64))]


@register
class MoeSumAdd(MoeSum):
    """``moe_sum_add``: the mix added to the residual (res, the third input) in the same pass."""

    op = "moe_sum_add"


class _Experts:
    """The chosen experts' products of one matmul_id shape: y[T, K*N] from x, W[E, N, K_in] and ids.

    Decode (pairs no more than the experts, so few share one): the experts' GEMV (ops/matmul.py Gemv,
    gemv_q.wgsl EXPERT: expert ids read on the device, the dense GEMV's splits). More pairs: the route
    dispatch lays them out expert by expert and cuts them into row tiles (the table: R[0] tiles, the order
    at R[1 ..], the tiles at R[1 + pairs ..]), and the dense GEMM's tiled kernel (ops/gemm.py: matrix units,
    integer dots or f32) runs one workgroup row per tile, so each chosen expert's weights are read once per
    tile of its pairs. Experts over one storage binding: ranges of whole experts, one dispatch each."""

    def __init__(self, dev, attrs, T: int, kx: int, E: int, N: int, K_in: int, K: int, qtype: str):
        qt = get_type(qtype)
        if K_in % qt.block_size or K_in % 8:
            raise ValueError(f"matmul_id: rows of {K_in} are not whole {qt.name} blocks")
        self.dev, self.T, self.pairs, self.N, self.K_in, self.E = dev, T, T * K, N, K_in, E
        xslot = int(kx == K * K_in)
        self.gemv = None
        if self.pairs <= E or K_in % 32:
            # attrs["gemv"]: benchmarks override the split as for a dense GEMV (dev/bench_moe.py's xs variant)
            self.gemv = Gemv(dev, {k: v for k, v in attrs.items() if k == "gemv"}, K_in, [qt.name], [N], False,
                             m=self.pairs, expert=(E, K, xslot))
            return
        self.x_rows = self.pairs if xslot else T
        tiles_at = 1 + self.pairs
        io = {"QUANT": qt.name.lower(), "HAS_BIAS": False, "HAS_RES": False, "NSEG": 1, "HAS_NORM": False,
              "EPS": f32_lit(0.0)}
        self.gk = GemmKernel(dev, self.x_rows, K_in, N, qt.name, io, attrs.get("gemm"),
                             grouped={"NE": E, "KSEL": K, "XSLOT": xslot, "IDT": tiles_at},
                             tile_rows=-(-self.pairs // E), rows_per_token=K if xslot else 1)
        bm = self.gk.tile[0]
        self.max_tiles = -(-self.pairs // bm) + min(E + 1, self.pairs)   # each run's last tile may be partial
        self.route = dev.pipeline("matmul_id_gemm.wgsl", "route", {
            "E": E, "KSEL": K, "T": T, "BM": bm, "MAX_TILES": self.max_tiles, "TILES_AT": tiles_at})
        self.table = dev.create_buffer(4 * (tiles_at + 3 * self.max_tiles), label="matmul_id tiles")
        self.row_bytes = qt.row_bytes(K_in)
        self.ranges = split_rows(E, N * self.row_bytes, dev.max_storage_binding, dev.storage_align)

    def rounded(self, case: Case) -> Case:
        """``case`` (its reference from its rounded x and weights: :func:`_rounded`) as this path rounds it:
        x to int8 per piece (integer-dot GEMV) or per 32 (integer-dot GEMM), x and weights to f16 (matrix
        units); else the case itself."""
        f16 = lambda a: np.asarray(a, np.float32).astype(np.float16).astype(np.float64)
        if self.gemv is not None:
            cfg = self.gemv.cfg
            return _rounded(case, lambda x: q8x_round(x, cfg.piece, cfg.ppb32)) if cfg.q8x else case
        if self.gk.q8:
            return _rounded(case, q8_round)
        return _rounded(case, f16, f16, 1e-4) if self.gk.mma else case

    def encode(self, x: Binding, w: Binding, ids: Binding, y: Binding, route: bool = True) -> list[Dispatch]:
        """The dispatches writing y; ``route`` False: the table and the GEMM's x pass are this step's already
        (the same ids and x, the dispatch before)."""
        if self.gemv is not None:
            return self.gemv.encode(x, [w], [None], y, ids=ids)
        out = []
        if route:
            bg = self.dev.bind_group(self.route, {0: self.dev.params_buffer, 3: ids, 5: self.table})
            out.append(Dispatch(self.route, bg, (1, 1, 1)))
        wbuf, wbase = (w[0], w[1]) if isinstance(w, tuple) else (w, 0)
        per_e = self.N * self.row_bytes
        for i, (e0, ne) in enumerate(self.ranges):
            dims = self.dev.uniform([self.K_in, self.N, self.N, 0, self.row_bytes, self.x_rows, e0, e0 + ne,
                                     self.N, 0, 0, 0, 0, 0, 0, 0])
            if i == 0:
                pre, xq = self.gk.x_pass(dims, x)
                out += pre if route else []
            ws = word_span(wbuf, wbase + e0 * per_e, ne * per_e)
            out += self.gk.encode({1: dims, 2: x, 3: ws, 4: x, 5: y, 7: x, 15: self.table, **xq}, self.N,
                                  row_tiles=self.max_tiles)
        return out


@register
class MatmulId(OpKernel):
    op = "matmul_id"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], in_shapes[2][1] * in_shapes[1][1])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        (T, kx), (E, N, K_in), (_, K) = self.in_shapes[0], self.in_shapes[1], self.in_shapes[2]
        self.ex = _Experts(self.dev, self.attrs, T, kx, E, N, K_in, K, self.in_types[1])

    def as_computed(self, case: Case) -> Case:
        return self.ex.rounded(case)

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        x, w, ids, y = buffers
        return self.ex.encode(x, w, ids, y)


@register
class MatmulIdSumAdd(OpKernel):
    """``matmul_id_sum_add``: res + the token's experts' products weighted by the router. Decode (the
    experts' GEMV, every expert in one binding): one GEMV whose workgroups each take a token's KSEL pairs
    over the same columns and store their weighted sum plus the residual (gemv_q.wgsl SUMK); otherwise the
    experts' products into a scratch buffer, then ``moe_sum_add``."""

    op = "matmul_id_sum_add"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], in_shapes[1][1])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        (T, kx), (E, N, K_in), (_, K) = self.in_shapes[0], self.in_shapes[1], self.in_shapes[2]
        self.fused = None
        if T * K <= E and K_in % 32 == 0:
            try:
                self.fused = Gemv(self.dev, {k: v for k, v in self.attrs.items() if k == "gemv"}, K_in,
                                  [self.in_types[1]], [N], False, has_res=True, m=T * K,
                                  expert=(E, K, int(kx == K * K_in)), sumk=True)
            except DeviceError:    # more experts than one binding holds, or too many a token: two passes
                self.fused = None
        if self.fused is None:
            self.ex = _Experts(self.dev, self.attrs, T, kx, E, N, K_in, K, self.in_types[1])
            self.mix = MoeSumAdd(self.dev, {}, [(T, K * N), (T, K), (T, N)], ["f32"] * 3, [(T, N)])
            self.nbytes = 4 * T * K * N

    def as_computed(self, case: Case) -> Case:
        if self.fused is not None:
            cfg = self.fused.cfg
            return _rounded(case, lambda x: q8x_round(x, cfg.piece, cfg.ppb32)) if cfg.q8x else case
        return self.ex.rounded(case)

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        x, w, ids, mix, res, out = buffers
        if self.fused is not None:
            return self.fused.encode(x, [w], [mix], out, res=res, ids=ids)
        y = (scratch_buffer(self.dev, self.nbytes, "moe experts"), 0, self.nbytes)
        return self.ex.encode(x, w, ids, y) + self.mix.encode([y, mix, res, out])


@register
class MatmulIdGlu(OpKernel):
    """``matmul_id_glu``: act(x Wg[e]) * (x Wu[e]) per (token, slot) pair. Decode, where the backend stored
    the up weights right after the gate weights (one binding): one experts' GEMV over both with the GLU in
    its epilogue (x read once, one dispatch). Otherwise the two products (prefill: one routing for both
    grouped GEMMs) into scratch buffers, then the glu."""

    op = "matmul_id_glu"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], in_shapes[3][1] * in_shapes[1][1])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        (T, kx), (E, N, K_in), (_, K) = self.in_shapes[0], self.in_shapes[1], self.in_shapes[3]
        if tuple(self.in_shapes[1]) != tuple(self.in_shapes[2]) or self.in_types[1] != self.in_types[2]:
            raise ValueError(f"matmul_id_glu: gate and up weights differ: {self.in_shapes[1:3]} {self.in_types[1:3]}")
        act = self.attrs["act"]
        self.ex = _Experts(self.dev, self.attrs, T, kx, E, N, K_in, K, self.in_types[1])
        self.row_bytes = get_type(self.in_types[1]).row_bytes(K_in)
        self.fused = None
        if self.ex.gemv is not None and 2 * E * N * self.row_bytes <= self.dev.max_storage_binding:
            self.fused = Gemv(self.dev, {}, K_in, [self.in_types[1]], [2 * N], False, act=act, m=T * K,
                              expert=(E, K, int(kx == K * K_in)))
        m, n = T, K * N
        self.glu = Glu(self.dev, {"act": act}, [(m, n)] * 2, ["f32"] * 2, [(m, n)])
        self.nbytes = 4 * m * n
        self.used_fused = False

    def as_computed(self, case: Case) -> Case:
        if self.used_fused and self.fused.cfg.q8x:
            cfg = self.fused.cfg
            return _rounded(case, lambda x: q8x_round(x, cfg.piece, cfg.ppb32))
        return case if self.used_fused else self.ex.rounded(case)

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        x, wg, wu, ids, y = buffers
        gb, go, gs = wg if isinstance(wg, tuple) else (wg, 0, wg.size)
        ub, uo, _ = wu if isinstance(wu, tuple) else (wu, 0, wu.size)
        size = self.ex.E * self.ex.N * self.row_bytes
        self.used_fused = self.fused is not None and ub is gb and uo == go + size
        if self.used_fused:
            return self.fused.encode(x, [(gb, go, 2 * size)], [None], y, ids=ids)
        g = scratch_buffer(self.dev, self.nbytes, "moe gate")
        u = scratch_buffer(self.dev, self.nbytes, "moe up")
        g, u = (g, 0, self.nbytes), (u, 0, self.nbytes)
        return (self.ex.encode(x, wg, ids, g) + self.ex.encode(x, wu, ids, u, route=False)
                + self.glu.encode([g, u, y]))


def _rounded(case: Case, x_round, w_round=lambda w: w, tol_add: float = 0.0) -> Case:
    """``case`` (matmul_id or matmul_id_glu) with its float64 reference recomputed from x and the dequantized
    weights as rounded."""
    sums = case.op == "matmul_id_sum_add"
    x, *raws, ids = case.inputs[:3] if sums else case.inputs
    qtype = case.in_types[1]

    def ref():
        xr = np.asarray(x_round(x), np.float64)
        ys = [matmul_id_ref(xr, w_round(dequantize(raw.reshape(-1, raw.shape[-1]), qtype)).reshape(*raw.shape[:2], -1)
                            .astype(np.float64), ids, n_tokens=case.n_tokens) for raw in raws]
        if sums:
            return [_mix64(ys[0], *case.inputs[3:])]
        return [glu64(*ys, case.attrs["act"])] if case.op == "matmul_id_glu" else ys
    return replace(case, name=case.name + " (as rounded)", reference=ref, tol=case.tol + tol_add)


def _mix64(y: np.ndarray, w: np.ndarray, res: np.ndarray) -> np.ndarray:
    """res + the K blocks of each row of y weighted by w, in float64."""
    T, K = w.shape
    return res.astype(np.float64) + np.einsum("tjn,tj->tn", y.reshape(T, K, -1), w.astype(np.float64))


def moe_sum_add_case(qtype: str, T: int, n_tokens: int, E: int, K: int, N: int, K_in: int, seed: int) -> Case:
    """A ``matmul_id_sum_add`` check: the experts' down products (one x block per chosen expert) of ``qtype``
    mixed by random weights and added to a residual; float64 reference (padded tokens: the residual, their
    weights zero as the gate stores them)."""
    g = rng(seed)
    raw = quantize((g.standard_normal((E * N, K_in)) * 0.5).astype(np.float32), qtype)
    ids = np.stack([g.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
    x = g.standard_normal((T, K * K_in)).astype(np.float32)
    x = q8_tie_free(x) if K_in % 32 == 0 else x
    w = g.random((T, K)).astype(np.float32)
    w[n_tokens:] = 0
    res = g.standard_normal((T, N)).astype(np.float32)

    def ref():
        y = matmul_id_ref(x.astype(np.float64), dequantize(raw, qtype).reshape(E, N, K_in).astype(np.float64), ids,
                          n_tokens=n_tokens)
        return [_mix64(y, w, res)]
    return Case("matmul_id_sum_add", f"matmul_id_sum_add {qtype} T={T} n_tokens={n_tokens} E={E} K={K} N={N} "
                f"k={K_in}", [x, raw.reshape(E, N, -1), ids, w, res], ["f32", qtype, "i32", "f32", "f32"], ref, 2e-5,
                n_tokens=n_tokens)


def moe_glu_case(qtype: str, T: int, n_tokens: int, E: int, K: int, N: int, K_in: int, act: str, seed: int) -> Case:
    """A ``matmul_id_glu`` check: gate and up experts of ``qtype``, float64 reference."""
    g = rng(seed)
    raws = [quantize((g.standard_normal((E * N, K_in)) * 0.5).astype(np.float32), qtype) for _ in range(2)]
    ids = np.stack([g.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
    x = q8_tie_free(g.standard_normal((T, K_in)).astype(np.float32))

    def ref():
        ys = [matmul_id_ref(x.astype(np.float64), dequantize(r, qtype).reshape(E, N, K_in).astype(np.float64), ids,
                            n_tokens=n_tokens) for r in raws]
        return [glu64(*ys, act)]
    return Case("matmul_id_glu", f"matmul_id_glu {qtype} T={T} n_tokens={n_tokens} E={E} K={K} N={N} k={K_in} {act}",
                [x, *(r.reshape(E, N, -1) for r in raws), ids], ["f32", qtype, qtype, "i32"], ref, 2e-5,
                attrs={"act": act}, n_tokens=n_tokens)


def moe_route_case(qtype: str, T: int, n_tokens: int, E: int, K: int, d: int, norm: bool, w_scale: float,
                   seed: int) -> Case:
    """A ``moe_route`` check: x [T, d], a router of ``qtype`` (F32/F16) and a norm weight; float64 reference
    of the norm, the router and the gate (ids compared exactly; the weights to 5e-6: a logit's f32 dot
    error, ~1e-7 of |logit| sqrt(d), moves its probability by that relative amount)."""
    g = rng(seed)
    x = (g.standard_normal((T, d)) * 2 + 0.3).astype(np.float32)
    wr = quantize((g.standard_normal((E, d)) * (2 / np.sqrt(d))).astype(np.float32), qtype)   # logits ~ N(0, 4)
    nw = (g.standard_normal(d) * 0.3 + 1).astype(np.float32)
    attrs = {"eps": 1e-6, "k": K, "norm": norm, "w_scale": w_scale}

    def ref():
        x64 = x.astype(np.float64)
        h = x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 1e-6) * nw
        logits = h @ dequantize(wr, qtype).astype(np.float64).T
        logits[n_tokens:] = 0
        ids, w = moe_gate_ref(logits, k=K, norm=norm, w_scale=w_scale, n_tokens=n_tokens)
        return [h, ids.astype(np.int32).view(np.float32), w]
    return Case("moe_route", f"moe_route {qtype} T={T} n_tokens={n_tokens} E={E} K={K} d={d} norm={norm} "
                f"scale={w_scale}", [x, wr, nw], ["f32", qtype, "f32"], ref, (2e-6, 0.0, 5e-6), attrs=attrs,
                n_tokens=n_tokens, nbytes=wr.nbytes + 8 * x.size)


def _moe_case(name: str, qtype: str, T: int, n_tokens: int, E: int, K: int, N: int, K_in: int,
              per_slot: bool, seed: int, one_expert: bool = False) -> Case:
    g = rng(seed)
    if E * N * K_in > 1 << 22:      # large: random blocks (normal scales), not the slow quantizer
        raw = random_blocks(qtype, E * N, K_in, g)
    else:
        raw = quantize((g.standard_normal((E * N, K_in)) * 0.5).astype(np.float32), qtype)
    ids = np.stack([g.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
    if T > 2:
        ids[1] = ids[0]                  # several pairs on one expert, and experts nobody picked
    if one_expert:
        ids[:] = np.arange(K, dtype=np.int32) + E - K     # every token the same last K experts
    # off the int8 rounding ties (as ops/gemm.py q8_tie_free): the integer-dot kernels' x rounds as numpy's
    x = g.standard_normal((T, (K if per_slot else 1) * K_in)).astype(np.float32)
    x = q8_tie_free(x) if K_in % 32 == 0 else x

    def ref():
        wf = dequantize(raw, qtype).reshape(E, N, K_in).astype(np.float64)
        return [matmul_id_ref(x.astype(np.float64), wf, ids, n_tokens=n_tokens)]
    return Case("matmul_id", name, [x, raw.reshape(E, N, -1), ids], ["f32", qtype, "i32"], ref, 2e-5,
                n_tokens=n_tokens, nbytes=len(np.unique(ids[:n_tokens])) * N * raw.shape[1])


@check("moe")
def _cases() -> Iterable[Case]:
    g = rng(41)
    for T, n, E, K, norm, scale in ((1, 1, 8, 2, True, 1.0), (5, 3, 16, 4, False, 2.5), (7, 7, 128, 8, True, 1.0),
                                    (3, 3, 160, 6, True, 1.0), (2, 2, 600, 8, True, 1.0),
                                    (2, 1, 300, 300, False, 1.0),      # every expert chosen: more picks than lanes
                                    (2, 2, 61, 5, True, 1.0)):         # E % 4: a tie in the last, partial word
        logits = g.standard_normal((T, E)).astype(np.float32) * 3
        logits[0, 1] = logits[0, 0]       # a tie: the lower id first
        logits[-1, E - 1] = logits[-1, 3] = logits[-1].max() + 1    # a tie at the top, across lanes

        def ref(logits=logits, k=K, norm=norm, scale=scale, n=n):
            ids, w = moe_gate_ref(logits.astype(np.float64), k=k, norm=norm, w_scale=scale, n_tokens=n)
            return [ids.astype(np.int32).view(np.float32), w]   # i32 outputs come back as f32 views
        yield Case("moe_gate", f"moe_gate T={T} n_tokens={n} E={E} K={K} norm={norm} scale={scale}",
                   [logits], ["f32"], ref, (0.0, 2e-6), attrs={"k": K, "norm": norm, "w_scale": scale},
                   n_tokens=n)
    # the fused norm + router + gate (decode): several workgroups per token and the last-one counter, padded
    # rows, F32 and F16 routers, rows past E in the last workgroup (E % RPW), many experts per lane
    for T, n, E, K, d, qtype, norm, scale in ((1, 1, 128, 8, 2048, "F32", True, 1.0),
                                              (3, 2, 8, 2, 256, "F16", False, 2.5),
                                              (2, 2, 100, 6, 64, "F32", True, 1.0),
                                              (2, 1, 300, 8, 136, "F16", True, 0.5),
                                              (1, 1, 37, 37, 64, "F32", False, 1.0)):   # E % 4, all chosen
        yield moe_route_case(qtype, T, n, E, K, d, norm, scale, seed=E + T)
    y = g.standard_normal((3, 4 * 100)).astype(np.float32)
    w = g.random((3, 4)).astype(np.float32)
    yield Case("moe_sum", "moe_sum T=3 K=4 n=100", [y, w], ["f32", "f32"],
               lambda: [np.einsum("tjn,tj->tn", y.astype(np.float64).reshape(3, 4, 100), w)], 1e-6)
    r = g.standard_normal((3, 100)).astype(np.float32)
    yield Case("moe_sum_add", "moe_sum_add T=3 K=4 n=100", [y, w, r], ["f32"] * 3,
               lambda: [r + np.einsum("tjn,tj->tn", y.astype(np.float64).reshape(3, 4, 100), w)], 1e-6)
    # the experts' down products mixed into the residual: the GEMV's weighted-sum epilogue (one token; three
    # of which one padded; six experts a token, its groups narrower), the grouped GEMM and moe_sum_add
    yield moe_sum_add_case("Q6_K", 1, 1, 16, 8, 96, 256, 15)
    yield moe_sum_add_case("Q4_K", 3, 2, 16, 4, 130, 512, 16)
    yield moe_sum_add_case("Q8_0", 1, 1, 8, 6, 64, 96, 17)
    yield moe_sum_add_case("Q4_K", 20, 17, 8, 2, 64, 256, 18)
    # gate, up and GLU of the experts (separate weight inputs: the two products and the glu)
    yield moe_glu_case("Q4_K", 1, 1, 8, 2, 96, 256, "silu", 13)
    yield moe_glu_case("Q4_K", 20, 17, 8, 2, 130, 512, "gelu_tanh", 14)
    # decode GEMVs (T == 1) and grouped prefill GEMMs, x shared by the slots or one block per slot
    yield _moe_case("matmul_id GEMV Q4_K E=8 K=2 N=96 k=256", "Q4_K", 1, 1, 8, 2, 96, 256, False, 1)
    yield _moe_case("matmul_id GEMV Q8_0 E=16 K=4 N=64 k=96 per-slot x", "Q8_0", 1, 1, 16, 4, 64, 96, True, 2)
    yield _moe_case("matmul_id GEMV F16 E=4 K=2 N=33 k=40", "F16", 1, 1, 4, 2, 33, 40, False, 3)
    yield _moe_case("matmul_id GEMM Q4_K T=20 n_tokens=17 E=8 K=2 N=130 k=512", "Q4_K", 20, 17, 8, 2, 130, 512,
                    False, 4)
    yield _moe_case("matmul_id GEMM Q6_K T=9 E=16 K=4 N=64 k=256 per-slot x", "Q6_K", 9, 9, 16, 4, 64, 256, True, 5)
    yield _moe_case("matmul_id GEMM Q5_0 T=40 E=64 K=8 N=70 k=96", "Q5_0", 40, 40, 64, 8, 70, 96, False, 6)
    yield _moe_case("matmul_id GEMM F32 T=6 E=3 K=3 N=65 k=64", "F32", 6, 6, 3, 3, 65, 64, False, 7)
    # the GEMV splits with integer dots where the adapter has them (x staged per workgroup, quantized by a
    # dispatch, per group), padded tokens' pairs; GEMMs with every pair on one expert over several tiles
    yield _moe_case("matmul_id GEMV Q4_K T=2 E=4 K=2 N=1536 k=2048", "Q4_K", 2, 2, 4, 2, 1536, 2048, False, 8)
    yield _moe_case("matmul_id GEMV Q4_K E=8 K=4 N=1024 k=512", "Q4_K", 1, 1, 8, 4, 1024, 512, False, 9)
    yield _moe_case("matmul_id GEMV Q6_K T=4 n_tokens=3 E=16 K=4 N=64 k=256 per-slot x", "Q6_K", 4, 3, 16, 4, 64,
                    256, True, 10)
    yield _moe_case("matmul_id GEMM Q4_K T=150 n_tokens=141 E=4 K=1 N=70 k=256 one expert", "Q4_K", 150, 141, 4, 1,
                    70, 256, False, 11, one_expert=True)
    yield _moe_case("matmul_id GEMM Q6_K T=67 E=8 K=2 N=96 k=256 per-slot x one expert pair", "Q6_K", 67, 67, 8, 2,
                    96, 256, True, 12, one_expert=True)
