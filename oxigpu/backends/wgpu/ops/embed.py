"""embed: gather rows of a quantized GGUF table (dequantized with the shared quant snippets) and scale.

Tables larger than the device's storage-binding limit (a 262k-row vocabulary, or any table on a
128 MiB-binding device) are bound as row ranges, one dispatch each."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ....quant import dequantize, get_type
from ....quant.samples import sample_weights
from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import f32_lit, grid, rng
from .matmul import TYPES, split_rows, word_span
from .quant_grid import grid_binds


@register
class Embed(OpKernel):
    op = "embed"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], in_shapes[1][1])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.qt = get_type(self.in_types[1])
        self.T = self.in_shapes[0][0]
        self.vocab, dim = self.in_shapes[1]
        self.row_bytes = self.qt.row_bytes(dim)
        self.n_threads = self.T * dim // 8
        self.pipe = self.dev.pipeline("embed.wgsl", "main", {
            "QUANT": self.qt.wgsl_file[:-5], "T": self.T, "DIM": dim,
            "SCALE": f32_lit(self.attrs.get("scale", 1.0))})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        ids, table, out = buffers
        buf, off, _ = table if isinstance(table, tuple) else (table, 0, table.size)
        out_ = []
        ranges = split_rows(self.vocab, self.row_bytes, self.dev.max_storage_binding, self.dev.storage_align)
        for i, (r0, rows) in enumerate(ranges):
            dims = self.dev.uniform([r0, r0 + rows, int(i == 0), self.vocab])
            bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: dims, 2: ids,
                                                 3: word_span(buf, off + r0 * self.row_bytes, rows * self.row_bytes),
                                                 4: out,
                                                 **grid_binds(self.dev, self.qt.name)})
            out_.append(Dispatch(self.pipe, bg, grid(self.n_threads)))
        return out_


EMBED_TYPES = TYPES
"""Every type with a dequant snippet (``ops/matmul.py`` ``TYPES``)."""


def table_case(qtype: str, vocab: int, dim: int, T: int, n_tokens: int, seed: int) -> Case:
    """A random table in ``qtype``, ids with repeats, -1 and out-of-range ids among the padding."""
    g = rng(seed)
    raw = sample_weights(qtype, vocab, dim, g)
    ids = g.integers(0, vocab, T).astype(np.int32)
    ids[n_tokens:] = -1
    if n_tokens > 1:
        ids[1] = ids[0]
    scale = math.sqrt(dim)

    def ref():
        rows = dequantize(raw, qtype).reshape(vocab, dim).astype(np.float64)
        out = np.zeros((T, dim))
        out[:n_tokens] = rows[ids[:n_tokens]] * np.float64(np.float32(scale))
        return [out]
    return Case("embed", f"embed {qtype} [{vocab},{dim}] T={T} n_tokens={n_tokens}", [ids, raw],
                ["i32", qtype], ref, 1e-6, attrs={"scale": scale}, n_tokens=n_tokens,
                nbytes=n_tokens * (raw.shape[1] + 4 * dim))


@check("embed")
def _cases() -> Iterable[Case]:
    for i, qtype in enumerate(EMBED_TYPES):
        yield table_case(qtype, 37, 512, 6, 4 if i % 2 else 6, seed=100 + i)
