"""rope_kv_attention: a decode step's rope of q and k, KV-cache write and attention in ONE dispatch.

The decode attention kernel (attention_decode.wgsl, Attention's launch shape and tuning) with the hooks
of attention/kv_rope.wgsl: q is rotated as it is loaded, the step's own key is rotated in registers by
the workgroups whose split holds it (never read back from the cache, so no workgroup waits for another's
write) and one workgroup per KV head stores the k and v rows. A decode layer saves the rope_kv_store
dispatch and its fixed latency. Decode graphs only (T == 1): prefill graphs keep
rope_kv_store and the prefill attention (graph/fuse.py)."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, check, register
from ._common import HALF_STEP, Batch, f32_lit, rng, workgroups_for
from .attention import Attention, paged_caches, paged_reference
from .attention import reference as attention_reference
from .rope import reference as rope_reference
from .rope import rope_defines, rope_table


@register
class RopeKvAttention(Attention):
    """Inputs q, k, v, K, V, positions, row_seq, block_table (the last three absent in plans built before
    block tables) (, freq_factors); output the attention of rope(q) over the caches with each row's own
    key rope(k) and value v, which it writes in place."""

    op = "rope_kv_attention"
    decode_only = True
    k_cache = 3

    def __init__(self, dev, attrs, in_shapes, in_types, out_shapes):
        paged = len(in_types) > 5 and in_types[5] == "i32"
        if in_shapes[0][0] != 1 and not paged:
            raise ValueError(f"rope_kv_attention runs decode steps only (T == 1 without block tables), got "
                             f"T = {in_shapes[0][0]}")
        self.ff = 8 if paged else 5
        self.qk_norm = "qk_norm_eps" in attrs        # the per-head q and k norm weights: the last two inputs
        super().__init__(dev, attrs, in_shapes, in_types, out_shapes)
        self.table = rope_table(dev, attrs)

    def key_source(self) -> dict:
        eps = f32_lit(self.attrs.get("qk_norm_eps", 0.0))
        return {"KV": "rope", "HAS_FF": len(self.in_shapes) - 2 * self.qk_norm == self.ff + 1,
                "QK_NORM": self.qk_norm, "QK_EPS": eps, **rope_defines(self.attrs, 10)}

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        q, k, v, ck, cv, out = (*buffers[:5], buffers[-1])
        ff = buffers[self.ff:len(buffers) - 1 - 2 * self.qk_norm]
        # without factors the shader never reads `ff`, but the binding exists: q stands in for it
        binds = {0: self.dev.params_buffer, 1: q, 2: ck, 3: cv, 4: out, 5: self.part, 6: self.counters,
                 7: k, 8: v, 9: ff[0] if ff else q, 10: self.table, **self.paged_binds(buffers)}
        if self.qk_norm:
            binds |= {15: buffers[-3], 16: buffers[-2]}
        return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), workgroups_for(self.n_groups))]


def rope_kv_attention_case(name: str, pos: int, H: int, Hkv: int, D: int, n_ctx: int, *, dv: int = 0,
                           n_rot: int = 0, neox: bool = True, base: float = 10000.0, freq_scale: float = 1.0,
                           with_ff: bool = False, window: int = 0, softcap: float = 0.0, n_split: int = 0,
                           split_chunk: int = 0, qk_norm: bool = False, seed: int = 0, **tuning_attrs) -> Case:
    """One decode step at ``pos``: random q, k, v and f16 caches whose row ``pos`` is NaN (the kernel must
    write it and never read it); expected: the output, then both caches with row pos = rope(k), v rounded
    to f16 (every other row unchanged). Tolerances: the output 2e-5, the K cache one f16 step (HALF_STEP:
    the kernel's f32 rope may round to the other neighbour), the V cache 0."""
    dv, n_rot = dv or D, n_rot or D
    g = rng(seed)
    q0 = g.standard_normal((1, H * D)).astype(np.float32)
    k0 = (g.standard_normal((1, Hkv * D)) * 2).astype(np.float32)
    v = g.standard_normal((1, Hkv * dv)).astype(np.float32)
    ck = (g.standard_normal((n_ctx, Hkv * D)) * 2).astype(np.float16)
    cv = g.standard_normal((n_ctx, Hkv * dv)).astype(np.float16)
    ck[pos] = cv[pos] = np.nan
    ff = np.where(np.arange(n_rot // 2) < n_rot // 4, 1.0, 8.0).astype(np.float32) if with_ff else None
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, n_rot=n_rot, base=base, neox=neox, freq_scale=freq_scale,
                 v_head_dim=dv, scale=1.0 / math.sqrt(D), window=window, softcap=softcap)
    if n_split:
        attrs["n_split"] = n_split
    if split_chunk:
        attrs["split_chunk"] = split_chunk
    attrs |= tuning_attrs           # more of the kernel's choices (attention.py TUNING_ATTRS)
    norms = [(g.standard_normal(D) * 0.3 + 1).astype(np.float32) for _ in range(2)] if qk_norm else []
    if qk_norm:
        attrs["qk_norm_eps"] = 1e-6

    def normed(x, w):   # per-head RMS norm in float64 (q and k as the kernel sees them after its prologue)
        if w is None:
            return x
        xs = x.astype(np.float64).reshape(1, -1, D)
        return (xs / np.sqrt((xs * xs).mean(-1, keepdims=True) + 1e-6) * w).reshape(1, -1)

    def ref():
        q, k = (normed(a, w) for a, w in zip((q0, k0), norms or (None, None)))
        ra = dict(head_dim=D, n_rot=n_rot, base=base, neox=neox, freq_scale=freq_scale, pos=pos, ff=ff)
        ck2, cv2 = ck.astype(np.float64), cv.astype(np.float64)
        ck2[pos], cv2[pos] = rope_reference(k, Hkv, **ra)[0].astype(np.float16), v[0].astype(np.float16)
        out = attention_reference(rope_reference(q, H, **ra), ck2, cv2, H, Hkv, D, dv, attrs["scale"], window,
                                  softcap, pos=pos, n_tokens=1)
        return [out, ck2, cv2]
    n_kv = min(pos + 1, window) if window else pos + 1
    return Case("rope_kv_attention", name, [q0, k0, v, ck, cv] + ([ff] if with_ff else []) + norms,
                ["f32"] * 3 + ["f16"] * 2 + ["f32"] * (with_ff + len(norms)), ref, (2e-5, HALF_STEP, 0.0),
                attrs=attrs, pos=pos,
                n_tokens=1, nbytes=2 * n_kv * Hkv * (D + dv), flops=2 * H * (D + dv) * n_kv)


@check("rope_kv_attention")
def _cases() -> Iterable[Case]:
    """Head layouts (GQA, MHA, several row blocks, D 4 .. 256, Dv != D), normal and NEOX rope (partial,
    halves that split a vec4, factors, freq_scale), windows and softcap, and the step's key at position 0,
    inside a split, ending one and alone in the last split."""
    c = rope_kv_attention_case
    yield c("qwen 14/2 D64 neox pos=0 (the step's key alone)", 0, 14, 2, 64, 64, seed=1)
    yield c("qwen 14/2 D64 neox pos=299", 299, 14, 2, 64, 320, base=1e6, seed=2)
    yield c("llama3 8/2 D64 normal ff pos=100", 100, 8, 2, 64, 128, neox=False, base=5e5, with_ff=True, seed=3)
    # split bookkeeping: split_chunk=64 with n_split=8 gives 64-key splits up to 512 keys on every device
    for pos, what in ((62, "inside split 0"), (63, "ending split 0"), (64, "alone in split 1"),
                      (65, "second key of split 1"), (255, "ending split 3"), (256, "alone in split 4"),
                      (447, "ending split 6"), (999, "inside the last of 8 splits of 128")):
        yield c(f"qwen 14/2 D64 n_split=8 chunk=64 pos={pos}: {what}", pos, 14, 2, 64, 1024, n_split=8,
                split_chunk=64, seed=20 + pos % 7)
    yield c("MHA 4/4 D128 normal rot=64 freq_scale=0.25 pos=776", 776, 4, 4, 128, 800, n_rot=64, neox=False,
            freq_scale=0.25, seed=4)
    yield c("gemma3 4/2 D256 neox window=50 softcap pos=200", 200, 4, 2, 256, 256, base=1e6, window=50,
            softcap=30.0, seed=5)
    yield c("8/2 D64 window=300 softcap n_split=16 chunk=64 pos=900", 900, 8, 2, 64, 960, window=300,
            softcap=20.0, n_split=16, split_chunk=64, seed=6)
    yield c("16/1 D128 (8 row blocks, one writes) neox ff pos=699", 699, 16, 1, 128, 720, with_ff=True, seed=7)
    yield c("6/2 D96 Dv64 normal pos=332", 332, 6, 2, 96, 400, dv=64, neox=False, seed=8)
    yield c("10/2 D16 neox rot=12 (halves split a vec4) n_split=4 pos=129", 129, 10, 2, 16, 160, n_rot=12,
            n_split=4, seed=9)
    yield c("10/2 D16 normal rot=12 pos=57", 57, 10, 2, 16, 64, n_rot=12, neox=False, seed=10)
    yield c("3/3 D4 normal (team = 1 lane) pos=69", 69, 3, 3, 4, 80, neox=False, seed=11)
    yield c("qwen 14/2 D64 neox max context pos=n_ctx-1=4095", 4095, 14, 2, 64, 4096, seed=12)
    # per-head q/k RMS norms fused in (qwen3: weights before the rotation, the head's scale after it)
    yield c("qwen3 q/k norm 32/4 D128 neox pos=70", 70, 32, 4, 128, 96, base=1e6, qk_norm=True, seed=13)
    # the grouped-query kernel (forced; D 32 fits lavapipe's 8-lane subgroups): the own key written, then read
    # back (gqa_own_reg=0)
    yield c("grouped-query 8/2 D32 neox n_split=8 chunk=64 pos=255 (ending split 3)", 255, 8, 2, 32, 520,
            n_split=8, split_chunk=64, seed=16, decode_gqa=1, gqa_own_reg=0)
    yield c("grouped-query 14/2 D32 normal ff window=100 softcap pos=700", 700, 14, 2, 32, 720, neox=False,
            with_ff=True, window=100, softcap=25.0, seed=17, decode_gqa=1, gqa_own_reg=0)
    yield c("grouped-query q/k norm 8/2 D32 neox pos=0", 0, 8, 2, 32, 32, qk_norm=True, seed=18, decode_gqa=1,
            gqa_own_reg=0)
    yield c("grouped-query q/k norm 8/2 D64 team_lanes=8 (two columns a lane) neox ff n_split=4 pos=300", 300, 8, 2,
            64, 320, with_ff=True, n_split=4, qk_norm=True, seed=19, decode_gqa=1, team_lanes=8, gqa_own_reg=0)
    # ... with the own key from registers (gqa_own_reg, the default): its NaN cache row read, then replaced, as
    # are the masked slots clamped to it
    for pos, what in ((0, "alone"), (62, "inside a pass"), (63, "ending split 0"), (64, "alone in split 1")):
        yield c(f"grouped-query own key from registers 8/2 D32 n_split=8 chunk=64 pos={pos} ({what})", pos, 8, 2,
                32, 520, n_split=8, split_chunk=64, seed=40 + pos % 5, decode_gqa=1, gqa_own_reg=1)
    yield c("grouped-query own key from registers 8/2 D64 team_lanes=8 pos=130", 130, 8, 2, 64, 160, seed=45,
            decode_gqa=1, team_lanes=8, gqa_own_reg=1)
    yield c("q/k norm 8/2 D64 normal ff n_split=4 pos=300", 300, 8, 2, 64, 320, neox=False, with_ff=True,
            n_split=4, qk_norm=True, seed=14)
    yield c("q/k norm 4/4 D256 neox pos=0", 0, 4, 4, 256, 32, qk_norm=True, seed=15)


@check("rope_kv_attention.bench", bench=True)
def _bench() -> Iterable[Case]:
    """Real decode shapes, short and long contexts (compare with attention.bench + rope_kv_store)."""
    yield rope_kv_attention_case("qwen-0.5B H14/2 D64 n_kv=65", 64, 14, 2, 64, 4096, base=1e6, seed=1)
    yield rope_kv_attention_case("qwen-0.5B H14/2 D64 n_kv=4096", 4095, 14, 2, 64, 4096, base=1e6, seed=2)
    yield rope_kv_attention_case("H32/8 D128 ff n_kv=4096", 4095, 32, 8, 128, 4096, neox=False,
                                 base=5e5, with_ff=True, seed=3)


def paged_rope_kv_attention_case(name: str, b: Batch, H: int, Hkv: int, D: int, *, dv: int = 0, n_rot: int = 0,
                                 neox: bool = True, base: float = 10000.0, with_ff: bool = False, window: int = 0,
                                 softcap: float = 0.0, qk_norm: bool = False, seed: int = 0, **tuning_attrs) -> Case:
    """A decode batch: one row per sequence (``b``: one-row runs), each at its own position; the cache row
    of each row's own key is NaN (written by the kernel, never read), rows no sequence holds are 8.
    Expected: the output, then both pools with those rows = rope(k), v rounded to f16 (every other row
    unchanged)."""
    dv, n_rot = dv or D, n_rot or D
    g = rng(seed)
    q0 = g.standard_normal((b.T, H * D)).astype(np.float32)
    k0 = (g.standard_normal((b.T, Hkv * D)) * 2).astype(np.float32)
    v = g.standard_normal((b.T, Hkv * dv)).astype(np.float32)
    q0[b.n_tokens:] = np.nan
    ck, cv = paged_caches(b, g, Hkv * D, Hkv * dv, own=True, poison=8.0)
    ff = np.where(np.arange(n_rot // 2) < n_rot // 4, 1.0, 8.0).astype(np.float32) if with_ff else None
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, n_rot=n_rot, base=base, neox=neox, freq_scale=1.0,
                 v_head_dim=dv, scale=1.0 / math.sqrt(D), window=window, softcap=softcap, block_size=b.block,
                 **tuning_attrs)
    norms = [(g.standard_normal(D) * 0.3 + 1).astype(np.float32) for _ in range(2)] if qk_norm else []
    if qk_norm:
        attrs["qk_norm_eps"] = 1e-6

    def ref():
        q, k = q0, k0
        if qk_norm:     # per-head RMS norms in float64 first
            q, k = ((x.astype(np.float64).reshape(b.T, -1, D) / np.sqrt((x.astype(np.float64).reshape(b.T, -1, D) ** 2)
                     .mean(-1, keepdims=True) + 1e-6) * w).reshape(b.T, -1) for x, w in zip((q0, k0), norms))
        ra = dict(head_dim=D, n_rot=n_rot, base=base, neox=neox, freq_scale=1.0, pos=b.positions, ff=ff)
        ck2, cv2 = ck.astype(np.float64), cv.astype(np.float64)
        kr = rope_reference(k, Hkv, **ra).astype(np.float16)
        for t in range(b.n_tokens):
            r = b.phys(int(b.row_seq[t]), int(b.positions[t]))
            ck2[r], cv2[r] = kr[t], v[t].astype(np.float16)
        out = paged_reference(rope_reference(q, H, **ra), ck2, cv2, b, **attrs)
        return [out, ck2, cv2]
    tail = ([ff] if with_ff else []) + norms
    return Case("rope_kv_attention", name, [q0, k0, v, ck, cv, *b.inputs(), *tail],
                ["f32"] * 3 + ["f16"] * 2 + ["i32"] * 3 + ["f32"] * len(tail), ref, (2e-5, HALF_STEP, 0.0),
                attrs=attrs, n_tokens=b.n_tokens, n_seqs=b.n_seqs)


@check("rope_kv_attention.paged")
def _paged_cases() -> Iterable[Case]:
    """Decode batches: each row's own key at position 0, ending a block, starting one, deep in a long
    context; slots out of order and padding rows; GQA 7 and 16, D 4 .. 256, factors, windows, splits."""
    c, B = paged_rope_kv_attention_case, Batch
    yield c("qwen 14/2 D64 neox pos 0/31/32/999", B([(0, 0, 1), (1, 31, 1), (2, 32, 1), (3, 999, 1)], 4, 32, 200),
            14, 2, 64, base=1e6, seed=1)
    yield c("llama3 8/2 D64 normal ff, slots out of order, 2 padding rows",
            B([(2, 100, 1), (0, 7, 1), (1, 64, 1)], 3, 8, 40, pad=2, seed=1), 8, 2, 64, neox=False, base=5e5,
            with_ff=True, seed=2)
    yield c("8/2 D64 window=300 softcap n_split=8 chunk=64", B([(0, 900, 1), (1, 255, 1), (2, 256, 1)], 3, 32, 120,
            seed=2), 8, 2, 64, window=300, softcap=20.0, seed=3, n_split=8, split_chunk=64)
    yield c("16/1 D128 (8 row blocks a row, one writes) neox ff", B([(1, 699, 1), (0, 1, 1)], 2, 24, 60, seed=3),
            16, 1, 128, with_ff=True, seed=4)
    yield c("gemma3 4/2 D256 neox window=50 softcap", B([(0, 200, 1), (1, 3, 1)], 2, 8, 20, seed=4), 4, 2, 256,
            base=1e6, window=50, softcap=30.0, seed=5)
    yield c("3/3 D4 normal (team = 1 lane)", B([(0, 69, 1), (1, 0, 1), (2, 32, 1)], 3, 4, 20, seed=5), 3, 3, 4,
            neox=False, seed=6)
    yield c("long cache (16,384 keys a sequence: a KV head's rows in one workgroup, transposed sums) 8/2 D128",
            B([(1, 3000, 1), (0, 17, 1)], 2, 512, 1024, seed=7), 8, 2, 128, base=5e5, seed=8, decode_gqa=0)
    yield c("grouped-query kernel 8/2 D32 neox, pos 0/31/32/999, 1 padding row",
            B([(0, 0, 1), (1, 31, 1), (2, 32, 1), (3, 999, 1)], 4, 32, 200, pad=1, seed=8), 8, 2, 32, seed=9,
            decode_gqa=1)
    yield c("grouped-query kernel 8/2 D64 team_lanes=8 (two columns a lane) normal, pos 0/700/33",
            B([(0, 0, 1), (1, 700, 1), (2, 33, 1)], 3, 32, 100, seed=11), 8, 2, 64, neox=False, seed=12,
            decode_gqa=1, team_lanes=8)
    yield c("grouped-query kernel, own key from registers, 8/2 D32, pos 0/31/32/999, split_group=2",
            B([(0, 0, 1), (1, 31, 1), (2, 32, 1), (3, 999, 1)], 4, 32, 200, seed=13), 8, 2, 32, seed=14,
            decode_gqa=1, gqa_own_reg=1, n_split=8, split_chunk=32, split_group=2)
    yield c("grouped-query kernel 14/2 D32 normal ff window=300 n_split=8 chunk=64 split_group=3, own key read back",
            B([(1, 900, 1), (0, 255, 1), (2, 256, 1)], 3, 32, 120, seed=9), 14, 2, 32, neox=False, with_ff=True,
            window=300, seed=10, n_split=8, split_chunk=64, split_group=3, decode_gqa=1, gqa_own_reg=0)
    yield c("qwen3 q/k norm 16/2 D128 neox ff, slots out of order, 1 padding row",
            B([(1, 40, 1), (0, 0, 1), (2, 95, 1)], 3, 8, 40, pad=1, seed=6), 16, 2, 128, base=1e6, with_ff=True,
            qk_norm=True, seed=7)
