"""kv_store: copy the chunk's valid K/V rows into the caches at their rows: f16 (rounded to nearest even:
shaders/common/half.wgsl) or ggml's q8_0 / q4_0 blocks (shaders/kv_store_q.wgsl)."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import Batch, cache_types, grid, kv_defines, paged_defines, rng


@register
class KvStore(OpKernel):
    """Inputs k, v, K, V, positions, row_seq, block_table (the last three absent in plans built before
    block tables: rows pos + t); K/V rows written in place."""

    op = "kv_store"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return []

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        T, wk = self.in_shapes[0]
        wv = self.in_shapes[1][1]
        self.paged = len(self.in_types) > 4
        types = cache_types("kv_store", self.in_types[2:4], (wk, wv))
        paged = paged_defines(self.paged, self.attrs, self.in_shapes[6] if self.paged else None,
                              self.in_shapes[2][0], (5, 6, 7))
        if types != ("f16", "f16"):     # a thread per 64 values: a block's scale needs all of it
            self.n_threads = T * (wk + wv) // 64
            self.pipe = self.dev.pipeline("kv_store_q.wgsl", "main", {
                "WK": wk, "WV": wv, "NQ": 0, "NK": T * wk // 64, "NT": self.n_threads, "ROPE": False,
                **kv_defines(types, (wk, wv)), **paged})
            return
        self.n_threads = T * (wk + wv) // 2
        self.pipe = self.dev.pipeline("kv_store.wgsl", "main", {
            "HK": wk // 2, "HV": wv // 2, "NT": self.n_threads, **paged})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        binds = {0: self.dev.params_buffer, 1: buffers[0], 2: buffers[1], 3: buffers[2], 4: buffers[3]}
        if self.paged:
            binds |= {5: buffers[4], 6: buffers[5], 7: buffers[6]}
        return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), grid(self.n_threads))]


@check("kv_store")
def _cases() -> Iterable[Case]:
    g = rng(14)
    for T, n_tok, wk, wv, n_ctx, pos in [(1, 1, 128, 128, 40, 17), (8, 5, 2 * 64, 2 * 96, 64, 3),
                                         (4, 4, 256, 256, 4, 0)]:
        k = g.standard_normal((T, wk)).astype(np.float32)
        v = g.standard_normal((T, wv)).astype(np.float32)
        ck = g.standard_normal((n_ctx, wk)).astype(np.float16)
        cv = g.standard_normal((n_ctx, wv)).astype(np.float16)

        def ref(k=k, v=v, ck=ck, cv=cv, pos=pos, n=n_tok):
            ck2, cv2 = ck.astype(np.float64), cv.astype(np.float64)
            ck2[pos:pos + n], cv2[pos:pos + n] = k[:n].astype(np.float16), v[:n].astype(np.float16)
            return [ck2, cv2]
        yield Case("kv_store", f"kv_store T={T} n_tokens={n_tok} pos={pos}", [k, v, ck, cv],
                   ["f32", "f32", "f16", "f16"], ref, 0.0, pos=pos, n_tokens=n_tok, nbytes=6 * n_tok * (wk + wv))


@check("kv_store.paged")
def _paged_cases() -> Iterable[Case]:
    """Rows of several sequences through scattered block tables: each valid row lands in its sequence's
    block at its position (runs crossing blocks, one-row runs, padding rows that must not land); every
    other cache row stays as it was."""
    g = rng(17)
    for runs, pad, wk, wv in [([(1, 30, 5), (0, 0, 2), (2, 95, 1)], 2, 128, 128),
                              ([(3, 7, 1), (0, 64, 1), (1, 31, 1), (2, 1023, 1)], 0, 2 * 64, 2 * 96)]:
        b = Batch(runs, n_seqs=4, blocks=32, pool=160, pad=pad, seed=len(runs))
        k = g.standard_normal((b.T, wk)).astype(np.float32)
        v = g.standard_normal((b.T, wv)).astype(np.float32)
        ck = g.standard_normal((b.rows, wk)).astype(np.float16)
        cv = g.standard_normal((b.rows, wv)).astype(np.float16)

        def ref(k=k, v=v, ck=ck, cv=cv, b=b):
            ck2, cv2 = ck.astype(np.float64), cv.astype(np.float64)
            for t in range(b.n_tokens):
                r = b.phys(int(b.row_seq[t]), int(b.positions[t]))
                ck2[r], cv2[r] = k[t].astype(np.float16), v[t].astype(np.float16)
            return [ck2, cv2]
        yield Case("kv_store", f"kv_store paged T={b.T} n_tokens={b.n_tokens} runs={runs}",
                   [k, v, ck, cv, *b.inputs()], ["f32", "f32", "f16", "f16", "i32", "i32", "i32"], ref, 0.0,
                   attrs={"block_size": b.block}, n_tokens=b.n_tokens, nbytes=6 * b.n_tokens * (wk + wv))
