"""kv_store: copy the chunk's valid K/V rows into the f16 caches at rows pos .. pos+n_tokens-1 (rounded to
nearest even: shaders/common/half.wgsl)."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import check_f16_caches, grid, rng


@register
class KvStore(OpKernel):
    op = "kv_store"
    writes = (2, 3)

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return []

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        T, wk = self.in_shapes[0]
        wv = self.in_shapes[1][1]
        check_f16_caches("kv_store", self.in_types[2:], (wk, wv))
        self.n_threads = T * (wk + wv) // 2
        self.pipe = self.dev.pipeline("kv_store.wgsl", "main", {"HK": wk // 2, "HV": wv // 2,
                                                                 "NT": self.n_threads})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: buffers[0], 2: buffers[1],
                                             3: buffers[2], 4: buffers[3]})
        return [Dispatch(self.pipe, bg, grid(self.n_threads))]


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
