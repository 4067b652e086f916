"""rope (and rope_kv_store, rope fused with the KV-cache write): rotary embeddings (normal and NEOX,
partial rotation, per-layer base, freq_scale and llama-3 frequency factors). The frequencies are computed
on the host in float64 as 64-bit fixed-point fractions of a turn, so angles stay exact at any position
(see common/rope.wgsl); the kernels (and the decode attention's fused rope) read them from a small
storage buffer (``rope_table``)."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import HALF_STEP, Batch, cache_types, grid, kv_defines, paged_defines, rng


def inv_freqs(n_rot: int, base: float, freq_scale: float) -> np.ndarray:
    """float64 ``freq_scale * base^(-2i/n_rot)``, i < n_rot/2."""
    return freq_scale * base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)


def rope_defines(attrs: dict, table_binding: int) -> dict:
    """Defines of common/rope.wgsl: head layout and the binding of the frequency table (:func:`rope_table`)."""
    return {"HD": attrs["head_dim"], "NROT": attrs["n_rot"], "NEOX": bool(attrs["neox"]),
            "ROPE_BINDING": table_binding}


def rope_table(dev, attrs: dict):
    """common/rope.wgsl's frequency table: per pair i, f_i / (2 pi) as a 64-bit fraction of a turn (high,
    low word), f_i's f32 bits, 0."""
    freqs = inv_freqs(attrs["n_rot"], attrs["base"], attrs.get("freq_scale", 1.0))
    turns = [int(round(f / (2 * np.pi) * 2.0 ** 64)) % 2 ** 64 for f in freqs]
    tab = np.zeros((len(turns), 4), np.uint32)
    tab[:, 0] = [t >> 32 for t in turns]
    tab[:, 1] = [t & 0xFFFFFFFF for t in turns]
    tab[:, 2] = freqs.astype(np.float32).view(np.uint32)
    return dev.upload(tab, label="rope.table")


@register
class Rope(OpKernel):
    """Inputs x, positions (i32[T]; absent in plans built before block tables: positions pos + t)
    (, freq_factors); output x rotated per row."""

    op = "rope"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        a = self.attrs
        self.paged = len(self.in_types) > 1 and self.in_types[1] == "i32"
        self.n_threads = self.in_shapes[0][0] * a["n_head"] * a["head_dim"] // 2
        self.has_ff = len(self.in_shapes) == 2 + self.paged
        self.pipe = self.dev.pipeline("rope.wgsl", "main", {
            "NT": self.n_threads, "NH": a["n_head"], "HAS_FF": self.has_ff, **rope_defines(a, 4),
            **paged_defines(self.paged, a, None, 1, (5, 6, 7))})
        self.table = rope_table(self.dev, a)

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        # without factors the shader never reads `ff`, but the binding exists: x stands in for it
        binds = {1: buffers[0], 2: buffers[-1], 3: buffers[1 + self.paged] if self.has_ff else buffers[0],
                 4: self.table}
        if self.paged:      # positions from their input, not the step's uniform
            binds[5] = buffers[1]
        else:
            binds[0] = self.dev.params_buffer
        return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), grid(self.n_threads))]


@register
class RopeKvStore(OpKernel):
    """``rope_kv_store``: inputs q, k, v, K, V, positions, row_seq, block_table (the last three absent in
    plans built before block tables) (, freq_factors); output rope(q); K/V rows written in place (f16,
    rounded to nearest even)."""

    op = "rope_kv_store"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        a = self.attrs
        self.paged = len(self.in_types) > 5 and self.in_types[5] == "i32"
        T = self.in_shapes[0][0]
        nq = T * a["n_head"] * a["head_dim"] // 2
        nk = nq + T * a["n_head_kv"] * a["head_dim"] // 2
        wv = self.in_shapes[2][1]
        wk = a["n_head_kv"] * a["head_dim"]
        types = cache_types("rope_kv_store", self.in_types[3:5], (wk, wv))
        self.ff = 8 if self.paged else 5
        self.has_ff = len(self.in_shapes) == self.ff + 1
        self.table = rope_table(self.dev, a)
        self.quantized = types != ("f16", "f16")
        if self.quantized:              # kv_store_q.wgsl: a thread per 64 values of k and v rows
            self.n_threads = nk + T * (wk + wv) // 64
            self.pipe = self.dev.pipeline("kv_store_q.wgsl", "main", {
                "WK": wk, "WV": wv, "NQ": nq, "NK": nq + T * wk // 64, "NT": self.n_threads,
                "ROPE": True, "NH": a["n_head"], "HAS_FF": self.has_ff, **rope_defines(a, 11),
                **kv_defines(types, (wk, wv)),
                **paged_defines(self.paged, a, self.in_shapes[7] if self.paged else None, self.in_shapes[3][0],
                                (5, 6, 7))})
            return
        self.n_threads = nk + T * wv // 2
        self.pipe = self.dev.pipeline("rope_kv.wgsl", "main", {
            "NQ": nq, "NK": nk, "NT": self.n_threads, "NH": a["n_head"], "NHKV": a["n_head_kv"], "WV": wv,
            "HAS_FF": self.has_ff, **rope_defines(a, 8),
            **paged_defines(self.paged, a, self.in_shapes[7] if self.paged else None, self.in_shapes[3][0],
                            (9, 10, 11))})

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        if self.quantized:
            binds = {0: self.dev.params_buffer, 1: buffers[1], 2: buffers[2], 3: buffers[3], 4: buffers[4],
                     8: buffers[0], 9: buffers[self.ff] if self.has_ff else buffers[0], 10: buffers[-1],
                     11: self.table}
            if self.paged:
                binds |= {5: buffers[5], 6: buffers[6], 7: buffers[7]}
            return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), grid(self.n_threads))]
        binds = {0: self.dev.params_buffer, **{i + 1: buffers[i] for i in range(5)},
                 6: buffers[self.ff] if self.has_ff else buffers[0], 7: buffers[-1], 8: self.table}
        if self.paged:
            binds |= {9: buffers[5], 10: buffers[6], 11: buffers[7]}
        return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), grid(self.n_threads))]


def reference(x: np.ndarray, n_head: int, head_dim: int, n_rot: int, base: float, neox: bool,
              freq_scale: float, pos: int | np.ndarray, ff: np.ndarray | None = None) -> np.ndarray:
    """float64 rope (independent of numpy_ops); ``pos``: the first row's position (rows at pos + t), or
    each row's."""
    f = inv_freqs(n_rot, base, freq_scale) / (1.0 if ff is None else ff.astype(np.float64))
    p = pos + np.arange(x.shape[0]) if np.ndim(pos) == 0 else np.asarray(pos, np.float64)
    th = p[:, None, None] * f[None, None, :]
    xh = x.astype(np.float64).reshape(x.shape[0], n_head, head_dim).copy()
    half = n_rot // 2
    i0 = np.arange(half) if neox else np.arange(0, n_rot, 2)
    i1 = i0 + half if neox else i0 + 1
    a, b = xh[..., i0].copy(), xh[..., i1].copy()
    xh[..., i0] = a * np.cos(th) - b * np.sin(th)
    xh[..., i1] = a * np.sin(th) + b * np.cos(th)
    return xh.reshape(x.shape)


@check("rope")
def _cases() -> Iterable[Case]:
    g = rng(13)
    for T, H, D, n_rot, base, neox, fs, pos, with_ff in [
            (1, 8, 64, 64, 10000.0, False, 1.0, 0, False),
            (5, 14, 64, 64, 1e6, True, 1.0, 37, False),
            (3, 4, 128, 64, 10000.0, True, 0.25, 5000, False),       # partial rotation, scaled
            (2, 4, 256, 256, 1e6, True, 1.0, 30000, False),           # gemma3 head_dim, long position
            (4, 3, 128, 128, 500000.0, False, 1.0, 100, True)]:       # llama-3 frequency factors
        x = g.standard_normal((T, H * D)).astype(np.float32)
        attrs = dict(n_head=H, head_dim=D, n_rot=n_rot, base=base, neox=neox, freq_scale=fs)
        ins, types, ff = [x], ["f32"], None
        if with_ff:
            ff = np.where(np.arange(n_rot // 2) < n_rot // 4, 1.0, 8.0).astype(np.float32)
            ins, types = [x, ff], ["f32", "f32"]
        yield Case("rope", f"rope T={T} H={H} D={D} rot={n_rot} {'neox' if neox else 'norm'} pos={pos}"
                   + (" ff" if with_ff else ""), ins, types,
                   lambda x=x, a=attrs, pos=pos, ff=ff: [reference(x, **a, pos=pos, ff=ff)], 1e-6,
                   attrs=attrs, pos=pos, n_tokens=T, nbytes=8 * x.size)


@check("rope_kv_store")
def _kv_cases() -> Iterable[Case]:
    """q and k rotated (k straight into the cache), v copied; padded rows never land; GQA, partial
    rotation, factors. Tolerances: q 1e-6; the K rows one f16 step (HALF_STEP); the V rows 0 (v rounds
    exactly as numpy rounds it)."""
    g = rng(15)
    for T, n_tok, H, Hkv, D, Dv, n_rot, neox, pos, with_ff in [
            (1, 1, 14, 2, 64, 64, 64, True, 37, False),
            (8, 5, 4, 1, 256, 256, 256, True, 3, False),
            (3, 3, 6, 2, 128, 96, 64, False, 20, True)]:
        q = g.standard_normal((T, H * D)).astype(np.float32)
        k = g.standard_normal((T, Hkv * D)).astype(np.float32)
        v = g.standard_normal((T, Hkv * Dv)).astype(np.float32)
        ck = g.standard_normal((40, Hkv * D)).astype(np.float16)
        cv = g.standard_normal((40, Hkv * Dv)).astype(np.float16)
        ff = np.where(np.arange(n_rot // 2) < n_rot // 4, 1.0, 4.0).astype(np.float32) if with_ff else None
        attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, n_rot=n_rot, base=10000.0, neox=neox, freq_scale=1.0)
        ra = dict(head_dim=D, n_rot=n_rot, base=10000.0, neox=neox, freq_scale=1.0, pos=pos, ff=ff)

        def ref(q=q, k=k, v=v, ck=ck, cv=cv, H=H, Hkv=Hkv, ra=ra, pos=pos, n=n_tok):
            ck2, cv2 = ck.astype(np.float64), cv.astype(np.float64)
            ck2[pos:pos + n] = reference(k, Hkv, **ra)[:n].astype(np.float16)
            cv2[pos:pos + n] = v[:n].astype(np.float16)
            return [reference(q, H, **ra), ck2, cv2]
        yield Case("rope_kv_store", f"rope_kv_store T={T} n_tokens={n_tok} H={H}/{Hkv} D={D} Dv={Dv} "
                   f"rot={n_rot} pos={pos}" + (" ff" if with_ff else ""),
                   [q, k, v, ck, cv] + ([ff] if with_ff else []), ["f32"] * 3 + ["f16"] * 2 + ["f32"] * with_ff,
                   ref, (1e-6, HALF_STEP, 0.0), attrs=attrs, pos=pos, n_tokens=n_tok)


@check("rope.paged")
def _paged_cases() -> Iterable[Case]:
    """Rows of several sequences, each at its own position (the batching contract): rope, and rope_kv_store
    writing k and v through scattered block tables (runs that start mid-block and cross blocks, a long
    position, padding rows that must not land). Every cache row not written must stay as it was."""
    g = rng(16)
    for T, runs, pad, H, Hkv, D, Dv, n_rot, neox, with_ff in [
            (7, [(0, 5, 3), (2, 0, 1), (1, 61, 3)], 0, 4, 2, 64, 64, 64, True, False),
            (12, [(3, 30, 9)], 3, 6, 2, 128, 96, 64, False, True),
            (5, [(1, 1000, 1), (0, 31, 1), (2, 32, 1), (3, 7, 1), (4, 63, 1)], 0, 8, 8, 32, 32, 32, True, False)]:
        b = Batch(runs, n_seqs=max(s for s, _, _ in runs) + 1, blocks=32, pool=200, pad=pad, seed=T)
        x = g.standard_normal((T, H * D)).astype(np.float32)
        k = g.standard_normal((T, Hkv * D)).astype(np.float32)
        v = g.standard_normal((T, Hkv * Dv)).astype(np.float32)
        ck = g.standard_normal((b.rows, Hkv * D)).astype(np.float16)
        cv = g.standard_normal((b.rows, Hkv * Dv)).astype(np.float16)
        ff = np.where(np.arange(n_rot // 2) < n_rot // 4, 1.0, 8.0).astype(np.float32) if with_ff else None
        attrs = dict(n_head=H, head_dim=D, n_rot=n_rot, base=1e4, neox=neox, freq_scale=1.0)
        ra = dict(head_dim=D, n_rot=n_rot, base=1e4, neox=neox, freq_scale=1.0, pos=b.positions, ff=ff)
        tail = [ff] if with_ff else []
        name = f"T={T} n_tokens={b.n_tokens} runs={runs} H={H}/{Hkv} D={D} rot={n_rot}" + (" ff" if with_ff else "")
        yield Case("rope", "rope paged " + name, [x, b.positions, *tail], ["f32", "i32"] + ["f32"] * with_ff,
                   lambda x=x, ra=ra, H=H: [reference(x, H, **ra)], 1e-6, attrs=attrs, n_tokens=b.n_tokens)

        def ref(q=x, k=k, v=v, ck=ck, cv=cv, H=H, Hkv=Hkv, ra=ra, b=b):
            ck2, cv2 = ck.astype(np.float64), cv.astype(np.float64)
            kr = reference(k, Hkv, **ra).astype(np.float16)
            for t in range(b.n_tokens):
                r = b.phys(int(b.row_seq[t]), int(b.positions[t]))
                ck2[r], cv2[r] = kr[t], v[t].astype(np.float16)
            return [reference(q, H, **ra), ck2, cv2]
        yield Case("rope_kv_store", "rope_kv_store paged " + name,
                   [x, k, v, ck, cv, *b.inputs(), *tail], ["f32"] * 3 + ["f16"] * 2 + ["i32"] * 3 + ["f32"] * with_ff,
                   ref, (1e-6, HALF_STEP, 0.0), attrs={**attrs, "n_head_kv": Hkv, "block_size": b.block},
                   n_tokens=b.n_tokens)
