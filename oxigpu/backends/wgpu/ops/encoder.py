"""Encoder ops: layer_norm, add_rows (token-type / position embeddings) and attention_self (bidirectional
attention within a chunk, no cache). Encoders run one text per step, so these are sized by the chunk."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ....quant import dequantize, get_type, quantize
from ...numpy_ops import add_rows as add_rows_ref
from ...numpy_ops import attention_self as attention_self_ref
from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import f32_lit, grid, rng, workgroups_for
from .quant_grid import grid_binds

MAX_T = 2048
"""Rows per chunk attention_self holds scores for in workgroup memory (8 KiB)."""


@register
class LayerNorm(OpKernel):
    op = "layer_norm"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.rows, n = self.in_shapes[0]
        self.pipe = self.dev.pipeline("layer_norm.wgsl", "main", {
            "N": n, "ROWS": self.rows, "EPS": f32_lit(self.attrs["eps"]), "WG": 256 if n > 256 else 64,
            "RED": "sg" if self.dev.has_subgroups else "wg"})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {1: buffers[0], 2: buffers[1], 3: buffers[2], 4: buffers[3]})
        return [Dispatch(self.pipe, bg, workgroups_for(self.rows))]


@register
class AddRows(OpKernel):
    op = "add_rows"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        qt = get_type(self.in_types[1])
        self.T, dim = self.in_shapes[0]
        if dim % qt.block_size or dim % 8:
            raise ValueError(f"add_rows: rows of {dim} are not whole {qt.name} blocks")
        self.n = self.T * dim // 8
        self.grid = grid_binds(self.dev, qt.name)      # the IQ types' lookup table (ops/quant_grid.py)
        self.pipe = self.dev.pipeline("add_rows.wgsl", "main", {
            "QUANT": qt.wgsl_file[:-5], "T": self.T, "DIM": dim, "ROW": max(int(self.attrs["row"]), 0),
            "BY_POS": int(self.attrs["row"] < 0),
            "M": self.in_shapes[1][0]})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        # inputs x, table (, positions where row == -1), then the output
        by_pos = len(buffers) > 3
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: buffers[0], 2: buffers[1],
                                             3: buffers[-1], 4: buffers[2] if by_pos else buffers[0], **self.grid})
        return [Dispatch(self.pipe, bg, grid(self.n))]


@register
class AttentionSelf(OpKernel):
    op = "attention_self"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], attrs["n_head"] * attrs["v_head_dim"])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        a = self.attrs
        self.T = self.in_shapes[0][0]
        if self.T > MAX_T:
            raise ValueError(f"attention_self: chunks of {self.T} rows exceed {MAX_T}")
        self.H = a["n_head"]
        self.pipe = self.dev.pipeline("attention_self.wgsl", "main", {
            "T": self.T, "H": self.H, "HKV": a["n_head_kv"], "D": a["head_dim"], "DV": a["v_head_dim"],
            "SCALE": f32_lit(a["scale"]), "WG": 64})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: buffers[0], 2: buffers[1],
                                             3: buffers[2], 4: buffers[3]})
        return [Dispatch(self.pipe, bg, (self.T, self.H, 1))]


@check("encoder")
def _cases() -> Iterable[Case]:
    g = rng(51)
    for rows, n in ((1, 64), (5, 768), (3, 1000)):
        x = (g.standard_normal((rows, n)) * 3 + 1).astype(np.float32)
        w, b = g.standard_normal(n).astype(np.float32), g.standard_normal(n).astype(np.float32)

        def ref(x=x, w=w, b=b):
            x64 = x.astype(np.float64)
            c = x64 - x64.mean(1, keepdims=True)
            return [c / np.sqrt((c * c).mean(1, keepdims=True) + 1e-12) * w + b]
        yield Case("layer_norm", f"layer_norm[{rows},{n}]", [x, w, b], ["f32"] * 3, ref, 2e-6,
                   attrs={"eps": 1e-12})
    for qtype, row, pos, T, n_tok in (("F32", 0, 0, 6, 4), ("F32", -1, 3, 8, 8), ("F16", -1, 0, 5, 3),
                                      ("Q8_0", 1, 0, 4, 4)):
        x = g.standard_normal((T, 64)).astype(np.float32)
        table = g.standard_normal((16, 64)).astype(np.float32)
        raw = quantize(table, qtype)

        positions = np.arange(pos, pos + T, dtype=np.int32)
        ins, types = ([x, raw], ["f32", qtype]) if row >= 0 else ([x, raw, positions], ["f32", qtype, "i32"])

        def ref(x=x, raw=raw, qtype=qtype, row=row, positions=positions, n_tok=n_tok):
            tab = dequantize(raw, qtype).reshape(16, 64).astype(np.float64)
            return [add_rows_ref(x.astype(np.float64), tab, positions, row=row, n_tokens=n_tok)]
        yield Case("add_rows", f"add_rows {qtype} row={row} pos={pos} T={T} n_tokens={n_tok}", ins, types, ref,
                   1e-6, attrs={"row": row}, pos=pos, n_tokens=n_tok)
    for T, n_tok, H, Hkv, D in ((1, 1, 2, 2, 32), (9, 7, 4, 2, 64), (40, 40, 12, 12, 64), (130, 100, 2, 1, 96)):
        q = g.standard_normal((T, H * D)).astype(np.float32)
        k = g.standard_normal((T, Hkv * D)).astype(np.float32)
        v = g.standard_normal((T, Hkv * D)).astype(np.float32)
        attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=D ** -0.5)

        def ref(q=q, k=k, v=v, attrs=attrs, n_tok=n_tok):
            return [attention_self_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                       n_tokens=n_tok, **attrs)]
        yield Case("attention_self", f"attention_self T={T} n_tokens={n_tok} H={H}/{Hkv} D={D}", [q, k, v],
                   ["f32"] * 3, ref, 2e-5, attrs=attrs, n_tokens=n_tok)
