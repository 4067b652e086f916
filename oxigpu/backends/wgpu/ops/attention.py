"""attention: fused causal attention over the KV cache (see shaders/attention.wgsl for the layout).

Decode (T == 1) splits the key range over NSPLIT workgroups per KV head (flash-decoding) and merges the
partials in a second dispatch; prefill (T > 1) runs the ``prefill`` entry, a flash attention with K/V
tiles in workgroup memory, each workgroup a block of query rows walking all its keys (no merge). The
optional ``n_split`` attr overrides the split count and runs ``main`` for any T (tests, tuning)."""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import f32_lit, rng, workgroups_for

TK = 64             # keys per tile = threads per workgroup
SHARED_FLOATS = 4096  # workgroup-memory budget (16 KiB, WebGPU's guaranteed minimum)
PREFILL_TILES = ((32, 64), (16, 64), (16, 32), (8, 32), (8, 16))
"""(query rows, keys) per prefill tile, largest first: the first that fits the workgroup memory is used."""


def prefill_tile(d: int, dv: int, limit_bytes: int) -> tuple[int, int, int] | None:
    """(BQ, BK, KS) of the prefill kernel for head dims d/dv within ``limit_bytes`` of workgroup memory;
    None when no tile fits (e.g. D = 256 in WebGPU's minimum 16 KiB): ``main`` runs prefill then."""
    ks = max(d, dv) // 4 | 1          # odd vec4 stride: consecutive keys in distinct banks
    for bq, bk in PREFILL_TILES:
        floats = 4 * (bq * d // 4 + bk * ks) + bq * bk + 2 * 128 + 2 * bq
        if 4 * floats <= limit_bytes:
            return bq, bk, ks
    return None


@register
class Attention(OpKernel):
    op = "attention"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0], attrs["n_head"] * attrs["v_head_dim"])]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        a = self.attrs
        T, H, Hkv = self.in_shapes[0][0], a["n_head"], a["n_head_kv"]
        D, DV = a["head_dim"], a["v_head_dim"]
        if D % 4 or DV % 4:
            raise ValueError(f"attention: head dims {D}/{DV} must be multiples of 4")
        n_ctx = self.in_shapes[1][0]
        G = H // Hkv
        R = min(T * G, 32, max(1, SHARED_FLOATS // (D + TK + 3)))
        nrb = -(-T * G // R)
        # decode: enough slices for ~256 workgroups (a big GPU's SMs twice over), at most one per tile
        split = a.get("n_split") or (min(64, -(-n_ctx // TK), -(-256 // (Hkv * nrb))) if T == 1 else 1)
        self.split, self.T, self.H = split, T, H
        self.n_groups = Hkv * nrb * split
        defines = {"D": D, "DV": DV, "G": G, "NH": H, "NKV": Hkv, "T": T, "R": R, "NRB": nrb, "TK": TK,
                   "NSPLIT": split, "DIRECT": split == 1, "SCALE": f32_lit(a["scale"]),
                   "SOFTCAP": f32_lit(a.get("softcap", 0.0)), "WINDOW": int(a.get("window", 0)),
                   "NACC": -(-R * DV // 4 // TK)}
        tile = prefill_tile(D, DV, int(self.dev.limits["max-compute-workgroup-storage-size"]))
        self.prefill = T > 1 and not a.get("n_split") and tile is not None
        if self.prefill:
            bq, bk, ks = tile
            prb = -(-T * G // bq)
            self.n_groups = Hkv * prb
            defines |= {"BQ": bq, "BK": bk, "KS": ks, "PRB": prb, "PACC": -(-bq * DV // 4 // 128)}
        else:
            defines |= {"BQ": 8, "BK": 16, "KS": 1, "PRB": 1, "PACC": 1}   # unused by ``main``
        self.pipe = self.dev.pipeline("attention.wgsl", "prefill" if self.prefill else "main", defines)
        if split > 1:
            self.combine = self.dev.pipeline("attention.wgsl", "combine", defines)
            self.partials = self.dev.create_buffer(split * T * H * (DV + 4) * 4, label="attention.partials")

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        q, k, v, out = buffers
        dst = out if self.split == 1 else self.partials
        bg = self.dev.bind_group(self.pipe, {0: self.dev.params_buffer, 1: q, 2: k, 3: v, 4: dst})
        ds = [Dispatch(self.pipe, bg, workgroups_for(self.n_groups))]
        if self.split > 1:
            bg2 = self.dev.bind_group(self.combine, {4: self.partials, 5: out})
            ds.append(Dispatch(self.combine, bg2, workgroups_for(self.T * self.H)))
        return ds


def reference(q, ck, cv, n_head, n_head_kv, head_dim, v_head_dim, scale, window=0, softcap=0.0, *,
              pos, n_tokens, **_):
    """float64 attention, one (row, head) at a time: independent of numpy_ops' vectorized version."""
    q, ck, cv = (np.asarray(a, np.float64) for a in (q, ck, cv))
    out = np.zeros((q.shape[0], n_head * v_head_dim))
    g = n_head // n_head_kv
    for t in range(n_tokens):
        p = pos + t
        j = np.arange(p + 1)
        if window:
            j = j[j > p - window]
        for h in range(n_head):
            kh = h // g
            s = ck[j, kh * head_dim:(kh + 1) * head_dim] @ q[t, h * head_dim:(h + 1) * head_dim] * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            w = np.exp(s - s.max())
            out[t, h * v_head_dim:(h + 1) * v_head_dim] = w @ cv[j, kh * v_head_dim:(kh + 1) * v_head_dim] / w.sum()
    return out


def attention_case(name: str, T: int, n_tokens: int, pos: int, H: int, Hkv: int, D: int, n_ctx: int,
                   window: int = 0, softcap: float = 0.0, n_split: int = 0, seed: int = 0) -> Case:
    """Random q and caches; cache rows at or past pos + n_tokens hold NaN (must never be read)."""
    g = rng(seed)
    q = g.standard_normal((T, H * D)).astype(np.float32)
    ck = (g.standard_normal((n_ctx, Hkv * D)) * 2).astype(np.float32)
    cv = g.standard_normal((n_ctx, Hkv * D)).astype(np.float32)
    ck[pos + n_tokens:] = np.nan
    cv[pos + n_tokens:] = np.nan
    q[n_tokens:] = np.nan
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=1.0 / math.sqrt(D),
                 window=window, softcap=softcap)
    if n_split:
        attrs["n_split"] = n_split
    n_kv = pos + n_tokens
    return Case("attention", name, [q, ck, cv], ["f32"] * 3,
                lambda: [reference(q, ck, cv, **attrs, pos=pos, n_tokens=n_tokens)], 2e-5, attrs=attrs,
                pos=pos, n_tokens=n_tokens, nbytes=8 * n_kv * Hkv * D, flops=4 * n_tokens * H * D * n_kv)


@check("attention")
def _cases() -> Iterable[Case]:
    yield attention_case("decode llama D=64 GQA4 n_kv=1", 1, 1, 0, 8, 2, 64, 16, seed=1)
    yield attention_case("decode qwen D=64 GQA7 n_kv=300", 1, 1, 299, 14, 2, 64, 320, seed=2)
    yield attention_case("decode D=128 MHA n_kv=777 split", 1, 1, 776, 4, 4, 128, 800, seed=3)
    yield attention_case("decode gemma3 D=256 GQA2 window=50 softcap", 1, 1, 200, 4, 2, 256, 256,
                         window=50, softcap=30.0, seed=4)
    yield attention_case("prefill D=64 GQA2 T=16 n_tokens=11 pos=5", 16, 11, 5, 4, 2, 64, 40, seed=5)
    yield attention_case("prefill D=128 GQA7 T=9 n_tokens=9", 9, 9, 0, 7, 1, 128, 9, seed=6)
    yield attention_case("prefill D=256 window=5 softcap T=12 n_tokens=10 pos=3", 12, 10, 3, 2, 1, 256,
                         16, window=5, softcap=50.0, seed=7)
    yield attention_case("prefill split=3 T=5 n_tokens=4 pos=70", 5, 4, 70, 4, 2, 64, 80, n_split=3,
                         seed=8)
    yield attention_case("prefill D=64 GQA7 T=70 n_tokens=67 pos=40 (several key tiles and row blocks)", 70, 67,
                         40, 14, 2, 64, 110, seed=9)
    yield attention_case("prefill D=128 GQA4 T=40 pos=100 window=90 softcap", 40, 40, 100, 8, 2, 128, 140,
                         window=90, softcap=30.0, seed=10)


@check("attention.bench", bench=True)
def _bench() -> Iterable[Case]:
    """Real model shapes: decode at long contexts (GB/s of K/V read) and a 512-token prefill."""
    yield attention_case("decode llama-1B H32/8 D64 n_kv=2048", 1, 1, 2047, 32, 8, 64, 2048, seed=1)
    yield attention_case("decode llama-8B H32/8 D128 n_kv=4096", 1, 1, 4095, 32, 8, 128, 4096, seed=2)
    yield attention_case("decode qwen-0.5B H14/2 D64 n_kv=4096", 1, 1, 4095, 14, 2, 64, 4096, seed=3)
    yield attention_case("decode gemma3 H4/1 D256 n_kv=4096 window=512", 1, 1, 4095, 4, 1, 256, 4096,
                         window=512, seed=4)
    yield attention_case("prefill llama-1B T=512 H32/8 D64", 512, 512, 0, 32, 8, 64, 512, seed=5)
