"""rms_norm: one workgroup per run of ``group`` values (whole rows, or heads for Q/K norms); rms_norm_add:
the same with the residual added as it stores."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import f32_lit, rng, workgroups_for


@register
class RmsNorm(OpKernel):
    op = "rms_norm"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        group = int(self.attrs["group"])
        self.nseg = math.prod(self.in_shapes[0]) // group
        wg = 64 if group <= 256 else 256   # per-head norms are short: fewer idle lanes
        self.pipe = self.dev.pipeline("rms_norm.wgsl", "main", {
            "GROUP": group, "NSEG": self.nseg, "EPS": f32_lit(self.attrs["eps"]), "WG": wg,
            "RED": "sg" if self.dev.has_subgroups else "wg", "RES": self.op == "rms_norm_add"})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        # the shader names res either way (statically used): plain rms_norm binds x there, unread
        res = buffers[2] if self.op == "rms_norm_add" else buffers[0]
        bg = self.dev.bind_group(self.pipe, {1: buffers[0], 2: buffers[1], 3: buffers[-1], 4: res})
        return [Dispatch(self.pipe, bg, workgroups_for(self.nseg))]


@register
class RmsNormAdd(RmsNorm):
    op = "rms_norm_add"


@check("rms_norm")
def _cases() -> Iterable[Case]:
    g = rng(12)
    for rows, n, group in [(1, 640, 640), (5, 1000, 1000), (3, 8 * 128, 128), (7, 4 * 256, 256),
                           (2, 5000, 5000)]:
        x = (g.standard_normal((rows, n)) * 3 + 0.5).astype(np.float32)
        w = (g.standard_normal(group) + 1).astype(np.float32)

        def ref(x=x, w=w, group=group):
            xs = x.astype(np.float64).reshape(x.shape[0], -1, group)
            inv = 1.0 / np.sqrt((xs * xs).mean(-1, keepdims=True) + 1e-6)
            return [(xs * inv * w).reshape(x.shape)]
        yield Case("rms_norm", f"rms_norm[{rows},{n}] group={group}", [x, w], ["f32", "f32"], ref, 2e-6,
                   attrs={"eps": 1e-6, "group": group}, nbytes=8 * x.size)


@check("rms_norm_add")
def _add_cases() -> Iterable[Case]:
    g = rng(13)
    for rows, n, group in [(1, 640, 640), (4, 1152, 1152), (3, 8 * 128, 128), (2, 5000, 5000)]:
        x = (g.standard_normal((rows, n)) * 3 + 0.5).astype(np.float32)
        w = (g.standard_normal(group) + 1).astype(np.float32)
        r = (g.standard_normal((rows, n)) * 2).astype(np.float32)

        def ref(x=x, w=w, r=r, group=group):
            xs = x.astype(np.float64).reshape(x.shape[0], -1, group)
            inv = 1.0 / np.sqrt((xs * xs).mean(-1, keepdims=True) + 1e-6)
            return [(xs * inv * w).reshape(x.shape) + r]
        yield Case("rms_norm_add", f"rms_norm_add[{rows},{n}] group={group}", [x, w, r], ["f32"] * 3, ref, 2e-6,
                   attrs={"eps": 1e-6, "group": group}, nbytes=12 * x.size)
