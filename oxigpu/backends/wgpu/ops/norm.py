"""rms_norm: one workgroup per run of ``group`` values (whole rows, or heads for Q/K norms)."""
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
            "RED": "sg" if self.dev.has_subgroups else "wg"})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        bg = self.dev.bind_group(self.pipe, {1: buffers[0], 2: buffers[1], 3: buffers[2]})
        return [Dispatch(self.pipe, bg, workgroups_for(self.nseg))]


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
