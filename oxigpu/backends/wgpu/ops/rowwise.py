"""scale (with soft-cap), act and split: one thread per output element (memory-bound, tiny next to the
matmuls they follow)."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import f32_lit, grid, rng

_NEUTRAL = {"SCALE": "1.0", "SOFTCAP": "0.0", "INV_SOFTCAP": "0.0", "COLS": 1, "COLS_IN": 1, "OFF": 0}


@register
class Scale(OpKernel):
    op = "scale"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.n = math.prod(self.out_shapes[0])
        cap = float(self.attrs.get("softcap", 0.0))
        self.pipe = self.dev.pipeline("rowwise.wgsl", "scale", {
            **_NEUTRAL, "N": self.n, "SCALE": f32_lit(self.attrs.get("scale", 1.0)), "SOFTCAP": f32_lit(cap),
            "INV_SOFTCAP": f32_lit(1.0 / cap if cap else 0.0)})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {1: buffers[0], 2: buffers[1]})
        return [Dispatch(self.pipe, bg, grid(self.n))]


@register
class Act(OpKernel):
    op = "act"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.n = math.prod(self.out_shapes[0])
        self.pipe = self.dev.pipeline("rowwise.wgsl", f"act_{self.attrs['act']}", {**_NEUTRAL, "N": self.n})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {1: buffers[0], 2: buffers[1]})
        return [Dispatch(self.pipe, bg, grid(self.n))]


@register
class Split(OpKernel):
    """One copy dispatch per output block."""
    op = "split"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], n) for n in attrs["sizes"]]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        rows, cols_in = self.in_shapes[0]
        self.parts = []
        off = 0
        for n in self.attrs["sizes"]:
            pipe = self.dev.pipeline("rowwise.wgsl", "copy_cols", {
                **_NEUTRAL, "N": rows * n, "COLS": n, "COLS_IN": cols_in, "OFF": off})
            self.parts.append((pipe, rows * n))
            off += n

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        x, outs = buffers[0], buffers[1:]
        return [Dispatch(pipe, self.dev.bind_group(pipe, {1: x, 2: out}), grid(n))
                for (pipe, n), out in zip(self.parts, outs)]


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


@check("rowwise")
def _cases() -> Iterable[Case]:
    g = rng(31)
    for shape in [(1, 7), (3, 1000), (5, 4099)]:
        x = (g.standard_normal(shape) * 40).astype(np.float32)
        x64 = x.astype(np.float64)
        for s, cap in ((0.5, 0.0), (1.0, 30.0), (1 / 3, 50.0)):
            yield Case("scale", f"scale{shape} s={s:.3g} softcap={cap}", [x], ["f32"],
                       lambda x=x64, s=s, cap=cap: [cap * np.tanh(x * s / cap) if cap else x * s],
                       1e-6, attrs={"scale": s, "softcap": cap}, nbytes=8 * x.size)
        xs = x / 10
        xs64 = xs.astype(np.float64)
        yield Case("act", f"act_gelu_tanh{shape}", [xs], ["f32"],
                   lambda x=xs64: [_gelu_tanh(x)], 1e-5, attrs={"act": "gelu_tanh"})
    for rows, sizes in ((6, (96, 32, 32)), (3, (1536, 1536))):
        x = g.standard_normal((rows, sum(sizes))).astype(np.float32)
        ends = np.cumsum(sizes)

        def ref(x=x, sizes=sizes, ends=ends):
            return [x[:, e - n:e].astype(np.float64) for n, e in zip(sizes, ends)]
        yield Case("split", f"split{x.shape} -> {'/'.join(map(str, sizes))}", [x], ["f32"], ref, 0.0,
                   attrs={"sizes": sizes})
