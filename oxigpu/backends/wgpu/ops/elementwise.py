"""add, mul, glu (silu / gelu_tanh) and last_row: memory-bound one-thread-per-element kernels."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import grid, rng


class _Binary(OpKernel):
    """y = f(a, b) elementwise; ``entry`` names the function in elementwise.wgsl."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.n = math.prod(self.out_shapes[0])
        self.pipe = self.dev.pipeline("elementwise.wgsl", self.entry(), {"N": self.n})

    def entry(self) -> str:
        return self.op

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {1: buffers[0], 2: buffers[1], 3: buffers[2]})
        return [Dispatch(self.pipe, bg, grid(self.n))]


@register
class Add(_Binary):
    op = "add"


@register
class Mul(_Binary):
    op = "mul"


@register
class Glu(_Binary):
    op = "glu"

    def entry(self) -> str:
        return f"glu_{self.attrs['act']}"


@register
class LastRow(OpKernel):
    op = "last_row"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(1, in_shapes[0][1])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.pipe = self.dev.pipeline("last_row.wgsl", "main", {"N": self.in_shapes[0][1]})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: buffers[0], 2: buffers[1]})
        return [Dispatch(self.pipe, bg, grid(self.in_shapes[0][1]))]


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


@check("elementwise")
def _cases() -> Iterable[Case]:
    g = rng(11)
    for shape in [(1, 7), (3, 1000), (5, 4099)]:
        a = g.standard_normal(shape).astype(np.float32) * 4
        b = g.standard_normal(shape).astype(np.float32)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        nb = 12 * a.size
        yield Case("add", f"add{shape}", [a, b], ["f32", "f32"], lambda a=a64, b=b64: [a + b], 1e-6, nbytes=nb)
        yield Case("mul", f"mul{shape}", [a, b], ["f32", "f32"], lambda a=a64, b=b64: [a * b], 1e-6, nbytes=nb)
        for act, f in (("silu", _silu), ("gelu_tanh", _gelu_tanh)):
            yield Case("glu", f"glu_{act}{shape}", [a, b], ["f32", "f32"],
                       lambda a=a64, b=b64, f=f: [f(a) * b], 1e-5, attrs={"act": act}, nbytes=nb)
    x = g.standard_normal((6, 333)).astype(np.float32)
    yield Case("last_row", "last_row(6,333) n_tokens=4", [x], ["f32"],
               lambda: [x[3:4].astype(np.float64)], 0.0, n_tokens=4, nbytes=8 * 333)
