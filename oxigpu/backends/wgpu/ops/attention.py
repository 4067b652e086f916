"""attention: fused causal attention over the KV cache.

Decode (T == 1) runs shaders/attention_decode.wgsl: split-KV flash attention in ONE dispatch, the
number of active splits derived from the step's position on the GPU and the splits merged by the
workgroup that finishes last (an atomic counter per row block). Prefill (T > 1) runs the ``prefill``
entry of shaders/attention.wgsl, a flash attention with K/V tiles in workgroup memory; where no prefill
tile fits the workgroup memory (D = 256 in WebGPU's minimum 16 KiB), or the ``n_split`` attr is given,
T > 1 runs the decode kernel too (its rows are then the T * G (token, head) pairs of a KV head).
``rope_kv_attention`` (ops/rope_attention.py) runs the decode kernel with rope and the cache write fused in.
The K/V caches are f16 (two halves per u32: shaders/common/half.wgsl); the math is f32.
Test/tuning attrs: ``n_split`` (the most splits per row block), ``split_chunk`` (the fewest keys per
split), ``key_slices`` (teams per row in a workgroup), ``decode_rows`` (most rows per workgroup),
``team_keys`` (keys per team pass, 4 or 8), ``team_lanes`` (lanes per team: 16 for 128-wide heads puts two
columns in each lane; either decode kernel), ``team_transposed`` (0 / 1: the team sums' form),
``split_group`` (splits per workgroup of a batch's step), ``decode_gqa`` (0 / 1: the grouped-query decode
kernel, one team for a KV head's query rows, ops/attention_gqa.py; by default where the heads and the
adapter's subgroups allow), ``gqa_own_reg`` (0 / 1: that kernel's own key from registers, DecodeTuning) and
``prefill_tile`` (the prefill kernel's tile, "NRG:RT:KT" with an "s" where K and V share a buffer; see
ops/attention_prefill.py; keeps the FMA kernel) and ``prefill_mma`` (False: the FMA kernel; True or a tile
"NSG:BK": the matrix-unit kernel wherever the device has it) and ``prefill_units`` (keys per unit, or -1:
from the step's keys; the matrix-unit kernel of one sequence cuts each row block's keys into units, merged
after). Without them, where ``Device.has_mma``, the head dims allow and the chunk fills the GPU (tuning.py
``PrefillTuning.mma_tiles``), prefill runs shaders/attention_mma.wgsl on the matrix units (f16 Q and P:
~5e-4 relative error); one sequence's chunks with many keys take the unit-cut variant (``OpKernel.deep``)."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ..tuning import GPU, device_class, tuning
from ._common import Batch, cache_types, f32_lit, kv_defines, paged_defines, rng, workgroups_for
from .attention_gqa import gqa_code, gqa_config, use_gqa
from .attention_mma import mma_defines, mma_tile
from .attention_prefill import prefill_config, prefill_defines
from .gemm import scratch_buffer


@dataclass(frozen=True)
class DecodeConfig:
    """Launch shape of attention_decode.wgsl (see its header for the names)."""

    R: int
    NRB: int
    L: int
    KS: int
    KB: int
    NCK: int
    NCV: int
    MAXS: int
    CHUNK: int
    SPW: int = 1
    TR: bool = False
    """Transposed team sums (attention/team_sg.wgsl): the same bits, fewer shuffles, one more dependent step."""

    @property
    def blk(self) -> int:
        return self.KS * self.KB

    @property
    def wg(self) -> int:
        """Invocations per workgroup of attention_decode.wgsl (a grouped-query config's workgroup is L * KS)."""
        return self.L * self.R * self.KS

    def splits(self, n_keys: int) -> tuple[int, int]:
        """(keys per split, active splits) for a row block seeing ``n_keys`` keys: the shader's rule."""
        kps = max(self.CHUNK, -(-n_keys // (self.MAXS * self.blk)) * self.blk)
        return kps, max(1, -(-n_keys // kps))


def decode_config(d: int, dv: int, g: int, t: int, n_kv_head: int, n_ctx: int, n_split: int = 0,
                  chunk: int = 0, slices: int = 0, max_rows: int = 0, team_keys: int = 0,
                  device: str = GPU, per_token: bool = False, spw: int = 0, team_lanes: int = 0) -> DecodeConfig:
    """The decode kernel's shape for head dims d/dv, GQA ratio g, T = t rows and an n_ctx cache (the
    constants: tuning.py ``DecodeTuning``).

    A team of L lanes (a power of two) spans the wider head in one or two vec4 columns per lane (L = 32
    up to 256 floats); R rows per workgroup (one team each, few enough for ``slices`` key slices) times KS
    key slices, ``lanes`` invocations; KB = 8 keys per team pass (4 where lanes hold two columns, to bound
    registers); splits of at least one workgroup pass, MAXS per row block: up to ``wg_per_slot`` workgroups
    per slot, and no more splits than splits of ``chunk_passes`` passes fill n_ctx (a split may be as
    short as one pass below that: a pass costs less than the merge). ``n_split`` fixes MAXS (and lets
    splits shrink to one workgroup pass, for tests); ``chunk`` overrides the split minimum, ``slices`` KS,
    ``max_rows`` the most rows per workgroup and ``team_keys`` KB. ``per_token`` (rows of several
    sequences): a row block holds rows of one token, NRB per token, split as one token's blocks are
    (n_ctx: one sequence's most keys), so a row's splits, and its sums, do not depend on the other rows.
    SPW, splits per workgroup (``spw`` fixes it): where t > 1 rows' blocks of MAXS splits would make more
    than ``spw_fill`` workgroups per slot, as many consecutive splits per workgroup as keep that many
    (results do not depend on it: the shader sums each split as its own workgroup would)."""
    tn = tuning(device)
    tu = tn.decode
    d4, dv4 = d // 4, dv // 4
    wide = max(d4, dv4)
    cols = 1 if wide <= 32 else 2
    lanes = 1 << (-(-wide // cols) - 1).bit_length()
    if team_lanes:     # a narrower team, two columns a lane (dev/ablate_decode_attention.py)
        lanes, cols = team_lanes, -(-wide // team_lanes)
        if cols > 2 or lanes & (lanes - 1):
            raise ValueError(f"attention: a team of {lanes} lanes cannot span {wide} vec4 columns in two")
    rows = g if per_token else t * g
    # long caches of 32-lane heads: a KV head's query rows in one workgroup (fewer key slices: its teams'
    # K and V loads meet in the cache) and transposed team sums, the kernel bound by throughput there
    long = n_ctx >= tu.long_keys and lanes == 32 and cols == 1 and not tu.key_slices and g * lanes <= tu.lanes
    if long and not slices:
        slices = max(1, min(8, tu.lanes // (lanes * g)))
    r = max(1, min(rows, max_rows or tu.rows, tu.lanes // (lanes * (slices or tu.slices)) or 1, tu.lanes // lanes))
    nrb = -(-rows // r)
    blocks = n_kv_head * nrb
    ks = slices or tu.key_slices or max(1, min(8, tu.lanes // (lanes * r)))
    if lanes * r * ks > 256:
        raise ValueError(f"attention: {ks} key slices of {r} rows x {lanes} lanes exceed 256 invocations")
    nck, ncv = -(-d4 // lanes), -(-dv4 // lanes)
    kb = team_keys or (8 if max(nck, ncv) == 1 else 4)
    c, maxs, spw = split_plan(ks * kb, n_ctx, chunk or ks * kb, tu.chunk_passes, tu.wg_per_slot * tn.slots // blocks,
                              tu.max_splits, n_split, t, spw, blocks * (t if per_token else 1),
                              tu.spw_fill * tn.slots)
    return DecodeConfig(R=r, NRB=nrb, L=lanes, KS=ks, KB=kb, NCK=nck, NCV=ncv, MAXS=maxs, CHUNK=c, SPW=spw,
                        TR=t > 1 or long)


def split_plan(blk: int, n_ctx: int, min_keys: int, chunk_passes: int, wg_splits: int, max_splits: int,
               n_split: int, t: int, spw: int, blocks: int, fill: float) -> tuple[int, int, int]:
    """(CHUNK, MAXS, SPW) of a split-KV decode kernel whose workgroup pass covers ``blk`` keys (both decode
    kernels): the fewest keys a split, ``min_keys`` rounded up to passes; MAXS (``n_split`` where given) up to
    ``wg_splits`` (the splits that fill the slots over a step's row blocks), no more than splits of
    ``chunk_passes`` passes fill n_ctx, at most ``max_splits``; SPW (``spw`` where given, 1 for a one-row
    step) as many consecutive splits a workgroup as leave the t > 1 rows' ``blocks`` row blocks at least
    ``fill`` workgroups, evened out."""
    c = -(-min_keys // blk) * blk
    maxs = n_split or min(-(-n_ctx // max(c, chunk_passes * blk)), max(1, wg_splits), max_splits)
    if t == 1:
        spw = 1             # the host launches a one-row step's active splits only (Attention.decode_groups)
    elif not spw:
        spw = 1
        while spw < maxs and blocks * -(-maxs // (spw + 1)) >= fill:
            spw += 1
        spw = -(-maxs // -(-maxs // spw))     # the same workgroups, their splits evened out
    return c, maxs, max(1, min(spw, maxs))


@register
class Attention(OpKernel):
    """Inputs q, K, V, positions, row_seq, block_table (the last three absent in plans built before block
    tables: one sequence at positions pos + t, cache row j at row j); output the attention of each row."""

    op = "attention"
    decode_only = False
    """rope_kv_attention: always the decode kernel (one row per sequence)."""
    k_cache = 1
    """Input index of the K cache (V follows, then the paged inputs); rope_kv_attention's caches come
    after q, k, v."""

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
        kc = self.k_cache
        types = cache_types(self.op, self.in_types[kc:kc + 2], (Hkv * D, Hkv * DV))
        if types != ("f16", "f16") and self.op != "attention":
            raise ValueError(f"{self.op}: the fused rope and cache write take f16 caches only, got {types}")
        self.paged = len(self.in_types) > kc + 2 and self.in_types[kc + 2] == "i32"
        n_ctx = self.in_shapes[kc][0]
        if self.paged:      # one sequence's most keys: its block-table row
            n_ctx = self.in_shapes[kc + 4][1] * int(a.get("block_size", 32))
        G = H // Hkv
        limit = int(self.dev.limits["max-compute-workgroup-storage-size"])
        # rows of several sequences: the prefill kernels build tiles of one sequence each (tile table:
        # attention/tiles_true.wgsl, 256 threads at most); a plan of one slot (single stream) takes fixed
        # row blocks as the contiguous form does, and its tiles keep the whole workgroup memory
        self.tiles = self.paged and self.in_shapes[kc + 4][0] > 1
        if self.tiles:
            limit -= 4 * 256 + 16
        common = {"D": D, "DV": DV, "G": G, "NH": H, "NKV": Hkv, "T": T, "SCALE": f32_lit(a["scale"]),
                  "SOFTCAP": f32_lit(a.get("softcap", 0.0)), "WINDOW": int(a.get("window", 0)),
                  **kv_defines(types, (Hkv * D, Hkv * DV))}
        self.part = self.counters = None
        self.units = 1
        self.gqa = False
        prefill = T > 1 and not a.get("n_split") and not self.decode_only
        paged = paged_defines(self.paged, a, self.in_shapes[kc + 4] if self.paged else None, self.in_shapes[kc][0],
                              (11, 12, 13))
        paged |= {"TILES": self.tiles}
        if prefill and not self.tiles and T <= tuning(device_class(self.dev)).prefill.decode_rows and not (
                {"prefill_tile", "prefill_mma", "prefill_units"} & set(a)):
            prefill = False     # a few rows of one sequence (a speculative verification): split over the keys
        # tiles of one sequence each (attention/tiles_true.wgsl), at most one more than the fixed blocks per
        # run of rows (the runs' and the padding's first tiles may be partial)
        extra = min(T, self.in_shapes[kc + 4][0] + 1) if self.tiles else 0
        mma = a.get("prefill_mma")   # None: chosen here; True or a tile: wherever the device can
        use = prefill and mma is not False and not (mma is None and a.get("prefill_tile")) and self.dev.has_mma
        cls = device_class(self.dev)
        mtile = mma_tile(D, DV, limit, mma if isinstance(mma, str) else None, cls) if use else None
        blocks = -(-T * G // mtile.BQ) if mtile else 0
        prb = blocks + extra if mtile else 0
        # whether the chunk fills the GPU counts row blocks of real rows: the tile table's `extra` workgroups
        # are mostly empty, so counting them picked the matrix-unit kernel for chunks the FMA kernel's
        # smaller tiles spread wider
        pt = tuning(cls).prefill
        window = int(a.get("window", 0))
        # a variant for one sequence's chunks with many keys (OpKernel.deep): the matrix-unit kernel, its
        # row blocks' keys cut into units (below); never for head dims it gains nothing on, nor where a
        # sliding window keeps the keys short
        deep = (mtile is not None and mma is None and not self.tiles and max(D, DV) <= pt.mma_deep_dim
                and not 0 < window < pt.mma_deep_keys)
        if mtile is not None and (mma is not None or Hkv * blocks >= tuning(cls).slots):
            self.prefill, self.cfg, self.split = True, mtile, 1
            units = self._units(n_ctx, mtile.BK, Hkv * blocks)
            self.n_groups = Hkv * prb * self.units
            self.pipe = self.dev.pipeline("attention_mma.wgsl", "main", common | mma_defines(mtile, D, DV) | {
                "PRB": prb} | units | paged)
            if self.units == 1 and deep and n_ctx >= 2 * pt.unit_long_keys:
                # the row blocks fill the GPU, but from two units of unit_long_keys keys on a block's key loop
                # is long enough that more workgroups still gain
                self.deep = type(self)(self.dev, {**a, "prefill_mma": True, "prefill_units": -1},
                                       self.in_shapes, self.in_types, self.out_shapes)
                self.deep_keys = 2 * pt.unit_long_keys
            return
        tile = prefill_config(D, DV, limit, a.get("prefill_tile"), T * G, Hkv, cls) if prefill else None
        self.prefill = tile is not None
        if self.prefill:
            blocks = -(-T * G // tile.BQ)
            units = self._units(n_ctx, tile.BK, Hkv * blocks)
            if deep:
                # too few row blocks to fill the GPU with the matrix-unit kernel, but with a longer context
                # each block's keys make up for that (tuning.py mma_deep_keys)
                self.deep = type(self)(self.dev, {**a, "prefill_mma": True, "prefill_units": -1},
                                       self.in_shapes, self.in_types, self.out_shapes)
                self.deep_keys = pt.mma_deep_keys
            elif (self.units == 1 and not self.tiles and "prefill_units" not in a
                  and not 0 < window < pt.mma_deep_keys
                  and (Hkv * blocks < pt.unit_fill * tuning(cls).slots or n_ctx >= 2 * pt.unit_long_keys)):
                # no matrix-unit variant (head dims past mma_deep_dim, or no matrix units): this kernel with
                # key units, where the row blocks leave the GPU idle or the context is long
                self.deep = type(self)(self.dev, {**a, "prefill_mma": False, "prefill_units": -1},
                                       self.in_shapes, self.in_types, self.out_shapes)
                self.deep_keys = pt.mma_deep_keys
            self.cfg = tile
            prb = blocks + extra
            self.n_groups = Hkv * prb * self.units
            self.split = 1
            defines = common | prefill_defines(tile, common["SCALE"]) | {
                "PRB": prb, "REDUCE": "sg" if self.dev.has_subgroups else "wg"} | units | paged
            self.pipe = self.dev.pipeline("attention.wgsl", "prefill", defines)
            return
        force, lanes = a.get("decode_gqa"), int(a.get("team_lanes", 0))
        self.gqa = use_gqa(D, DV, G, self.dev.subgroup_min_size, cls, None if force is None else int(force), lanes)
        if self.gqa:
            if not self.dev.has_subgroups:
                raise ValueError("attention: decode_gqa=1 needs subgroups")
            cfg = gqa_config(D, G, T, Hkv, n_ctx, int(a.get("n_split", 0)), int(a.get("split_chunk", 0)), cls,
                             spw=int(a.get("split_group", 0)), lanes=lanes)
            # its partials grow with the rows (a row's splits are a one-row step's): a batch too large for
            # one binding of them takes the per-row-team kernel (results within tolerance, not bit-equal)
            if force is None:
                self.gqa = Hkv * T * cfg.MAXS * cfg.R * (DV // 4 + 1) * 16 <= self.dev.max_storage_binding
        if not self.gqa:
            cfg = decode_config(D, DV, G, T, Hkv, n_ctx, int(a.get("n_split", 0)), int(a.get("split_chunk", 0)),
                                int(a.get("key_slices", 0)), int(a.get("decode_rows", 0)), int(a.get("team_keys", 0)),
                                cls, self.paged, int(a.get("split_group", 0)), lanes)
        self.cfg = cfg
        self.split = cfg.MAXS
        self.one_row, self.window = T == 1, int(a.get("window", 0))
        # row blocks per KV head (the grouped-query kernel: one per token)
        nrbt = T if self.gqa else cfg.NRB * (T if self.paged else 1)
        n_blocks = Hkv * nrbt
        self.n_blocks = n_blocks
        self.n_groups = n_blocks * -(-cfg.MAXS // cfg.SPW)
        launch = {"L": cfg.L, "KB": cfg.KB, "MAXS": cfg.MAXS, "CHUNK": cfg.CHUNK, "SPW": cfg.SPW, **paged,
                  **self.key_source()}
        if self.gqa:
            self.pipe = self.dev.pipeline("attention_decode_gqa.wgsl", "main", common | launch | {
                "GP": cfg.R, "KS": cfg.KS, "NC": cfg.NCK, "TRANSPOSED": False,
                "OWN_REG": bool(int(a.get("gqa_own_reg", tuning(cls).decode.gqa_own_reg))),
                **gqa_code(cfg.L, G, cfg.R, cfg.NCK)})
        else:
            merge = cfg.KS * cfg.R if cfg.KS > 1 else 1
            self.pipe = self.dev.pipeline("attention_decode.wgsl", "main", common | launch | {
                "R": cfg.R, "NRB": cfg.NRB, "NRBT": nrbt, "KS": cfg.KS, "NCK": cfg.NCK, "NCV": cfg.NCV,
                "TML": merge, "TACC": merge * DV // 4 if cfg.KS > 1 else 1,
                "REDUCE": "sg" if self.dev.has_subgroups else "wg",
                "TRANSPOSED": bool(int(a.get("team_transposed", cfg.TR)))})
        part_bytes = n_blocks * cfg.MAXS * cfg.R * (DV // 4 + 1) * 16 if cfg.MAXS > 1 else 16
        # one device-wide buffer: a dispatch's partials are merged before the next dispatch runs
        self.part = (scratch_buffer(self.dev, part_bytes, "attention partials"), 0, part_bytes)
        self.counters = self.dev.create_buffer(4 * n_blocks, label="attention.counters")   # zero-filled

    def _units(self, n_ctx: int, bk: int, wgs: int) -> dict:
        """Key units of a prefill kernel of one sequence (attention/units.wgsl) for attr ``prefill_units``
        (keys per unit, -1: from the step's keys, 0 or absent: none; never with TILES): sets ``units`` (1:
        none) and, with units, the partials' scratch and the merge pipeline; returns the shader's defines.
        ``wgs``: the kernel's row blocks over all KV heads, ``bk`` its keys per tile."""
        a, cls = self.attrs, device_class(self.dev)
        pt = tuning(cls).prefill
        T, H, DV = self.in_shapes[0][0], a["n_head"], a["v_head_dim"]
        pu = 0 if self.tiles else int(a.get("prefill_units", 0))
        ku, nu = (pu, -(-n_ctx // pu)) if pu > 0 else (0, 1)
        if pu < 0:   # as many as fit one storage binding (long chunks of many heads: fewer)
            cap = self.dev.max_storage_binding // (4 * T * H * (DV + 2))
            nu = min(pt.max_units, -(-n_ctx // bk), cap)
        if nu < 2:
            ku, nu = 0, 1
        self.units = nu
        if nu > 1:
            nbytes = 4 * nu * T * H * (DV + 2)
            self.part = (scratch_buffer(self.dev, nbytes, "attention units"), 0, nbytes)
            self.merge_pipe = self.dev.pipeline("attention_merge_units.wgsl", "main",
                                                {"NU": nu, "TRW": T * H, "NH": H, "DV": DV})
        return {"KU": ku, "NU": nu, "WGS": wgs, "RS": pt.unit_fill * tuning(cls).slots, "LONGK": pt.unit_long_keys,
                "UNITS": nu > 1, "TRW": T * H}

    def decode_groups(self, pos: int) -> int | None:
        """Workgroups a one-token step at ``pos`` needs: its row blocks' active splits (the shader maps
        workgroups to them so when T == 1); None where the grid stays whole (prefill, T > 1)."""
        if self.prefill or not self.one_row:
            return None
        n_keys = min(pos + 1, self.window) if self.window else pos + 1
        return self.n_blocks * self.cfg.splits(n_keys)[1]

    def key_source(self) -> dict:
        """Defines of the decode kernel's attention/kv_*.wgsl hooks: q and every key from the buffers."""
        return {"KV": "cache"}

    def paged_binds(self, buffers: list[Binding]) -> dict[int, Binding]:
        """Bindings of the positions, row_seq and block_table inputs (none in the contiguous form)."""
        if not self.paged:
            return {}
        kc = self.k_cache
        if self.prefill and not self.tiles:     # fixed row blocks of one slot: row_seq is never read
            return {11: buffers[kc + 2], 13: buffers[kc + 4]}
        return {11: buffers[kc + 2], 12: buffers[kc + 3], 13: buffers[kc + 4]}

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        q, k, v, out = buffers[0], buffers[1], buffers[2], buffers[-1]
        binds = {0: self.dev.params_buffer, 1: q, 2: k, 3: v, 4: out, **self.paged_binds(buffers)}
        if not self.prefill:
            binds |= {5: self.part, 6: self.counters}
        if self.prefill and self.units > 1:   # the key units' partials, then their merge into out
            binds[5] = self.part
            del binds[4]                        # the kernel writes the partials only
            merge = self.dev.bind_group(self.merge_pipe, {0: self.dev.params_buffer, 1: self.part, 2: out})
            n_out = self.in_shapes[0][0] * self.attrs["n_head"] * self.attrs["v_head_dim"]
            return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), workgroups_for(self.n_groups)),
                    Dispatch(self.merge_pipe, merge, workgroups_for(-(-n_out // 64)))]
        bg = self.dev.bind_group(self.pipe, binds)
        return [Dispatch(self.pipe, bg, workgroups_for(self.n_groups))]


TUNING_ATTRS = ("n_split", "split_chunk", "key_slices", "decode_rows", "team_keys", "team_lanes", "team_transposed",
                "split_group", "decode_gqa", "gqa_own_reg", "prefill_tile", "prefill_mma", "prefill_units")
"""The kernel choices above: attrs of a test case that the op itself (numpy_ops.attention) does not take."""


def op_attrs(attrs: dict) -> dict:
    """``attrs`` without ``TUNING_ATTRS``: what numpy_ops.attention takes."""
    return {k: v for k, v in attrs.items() if k not in TUNING_ATTRS}


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


def paged_reference(q, ck, cv, b: Batch, n_head, n_head_kv, head_dim, v_head_dim, scale, window=0, softcap=0.0,
                    **_):
    """float64 attention of rows of several sequences (``b``): row t sees the logical keys of its slot up to
    its position, read at their physical rows; padding rows are zero."""
    q, ck, cv = (np.asarray(a, np.float64) for a in (q, ck, cv))
    out = np.zeros((q.shape[0], n_head * v_head_dim))
    g = n_head // n_head_kv
    for t in range(b.n_tokens):
        p, sl = int(b.positions[t]), int(b.row_seq[t])
        j = np.arange(p + 1)
        if window:
            j = j[j > p - window]
        r = b.phys(sl, j)
        for h in range(n_head):
            kh = h // g
            sc = ck[r, kh * head_dim:(kh + 1) * head_dim] @ q[t, h * head_dim:(h + 1) * head_dim] * scale
            if softcap:
                sc = softcap * np.tanh(sc / softcap)
            w = np.exp(sc - sc.max())
            out[t, h * v_head_dim:(h + 1) * v_head_dim] = w @ cv[r, kh * v_head_dim:(kh + 1) * v_head_dim] / w.sum()
    return out


def paged_caches(b: Batch, g: np.random.Generator, kw: int, vw: int, own: bool = False, poison: float = np.nan):
    """Pools whose rows each sequence of ``b`` holds (its logical rows up to its last position in the
    step) are random and all others ``poison`` (never read: NaN, or a finite value where the pools are
    compared as outputs, large enough that an extra key moves a result); with ``own`` the row at that last
    position is NaN (the kernel writes it, reading it first would show)."""
    ck = np.full((b.rows, kw), poison, np.float16)
    cv = np.full((b.rows, vw), poison, np.float16)
    for sl in set(int(x) for x in b.row_seq[:b.n_tokens]):
        last = int(b.positions[:b.n_tokens][b.row_seq[:b.n_tokens] == sl].max())
        r = b.phys(sl, np.arange(last + 1))
        ck[r] = (g.standard_normal((len(r), kw)) * 2).astype(np.float16)
        cv[r] = g.standard_normal((len(r), vw)).astype(np.float16)
        if own:
            ck[r[-1]] = cv[r[-1]] = np.nan
    return ck, cv


def paged_attention_case(name: str, b: Batch, H: int, Hkv: int, D: int, dv: int = 0, window: int = 0,
                         softcap: float = 0.0, seed: int = 0, **tuning_attrs) -> Case:
    """Rows of several sequences (``b``) over paged caches (:func:`paged_caches`); padding rows' q is NaN."""
    dv = dv or D
    g = rng(seed)
    q = g.standard_normal((b.T, H * D)).astype(np.float32)
    q[b.n_tokens:] = np.nan
    ck, cv = paged_caches(b, g, Hkv * D, Hkv * dv)
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=dv, scale=1.0 / math.sqrt(D), window=window,
                 softcap=softcap, block_size=b.block, **tuning_attrs)
    n_kv = sum(min(int(p) + 1, window or int(p) + 1) for p in b.positions[:b.n_tokens])
    return Case("attention", name, [q, ck, cv, *b.inputs()], ["f32", "f16", "f16", "i32", "i32", "i32"],
                lambda: [paged_reference(q, ck, cv, b, **attrs)], 2e-5, attrs=attrs, n_tokens=b.n_tokens,
                n_seqs=b.n_seqs, nbytes=2 * n_kv * Hkv * (D + dv), flops=2 * H * (D + dv) * n_kv)


@check("attention.paged")
def _paged_cases() -> Iterable[Case]:
    """Rows of several sequences, each through its own scattered block table: decode batches (one row per
    sequence; positions at block edges, long and short contexts), GQA 7, windows and soft caps, D 16 ..
    256, a step mixing a prompt chunk with decode rows, padding rows."""
    B = Batch
    yield paged_attention_case("decode batch D=64 GQA4 pos 0/31/32/700/1500",
                               B([(0, 0, 1), (1, 31, 1), (2, 32, 1), (3, 700, 1), (4, 1500, 1)], 5, 64, 400), 8, 2,
                               64, seed=1)
    yield paged_attention_case("decode batch qwen D=64 GQA7 window=300 softcap, slots out of order",
                               B([(3, 299, 1), (0, 1000, 1), (2, 5, 1), (1, 64, 1)], 4, 40, 200, seed=1), 14, 2, 64,
                               window=300, softcap=30.0, seed=2)
    yield paged_attention_case("decode batch D=128 MHA n_split=4 chunk=32 (splits in every row block)",
                               B([(0, 400, 1), (1, 63, 1), (2, 129, 1)], 3, 16, 60, seed=2), 4, 4, 128, seed=3,
                               n_split=4, split_chunk=32)
    yield paged_attention_case("decode batch, long cache (16,384 keys a sequence) D=128 GQA4 pos 2500/40",
                               B([(0, 2500, 1), (1, 40, 1)], 2, 512, 1024, seed=9), 8, 2, 128, seed=15, decode_gqa=0)
    yield paged_attention_case("decode batch D=128 GQA4, teams of 16 lanes (two columns a lane) pos 900/31",
                               B([(1, 900, 1), (0, 31, 1)], 2, 32, 80, seed=10), 8, 2, 128, seed=16, team_lanes=16,
                               team_transposed=1, decode_gqa=0)
    yield paged_attention_case("decode batch gemma3 D=256 GQA2 window=50 softcap",
                               B([(1, 200, 1), (0, 33, 1)], 2, 8, 20, seed=3), 4, 2, 256, window=50, softcap=30.0,
                               seed=4)
    yield paged_attention_case("decode batch D=16 GQA5 (team of 4 lanes), 2 live of 4 rows",
                               B([(2, 130, 1), (0, 7, 1)], 3, 8, 30, pad=2, seed=4), 10, 2, 16, seed=5)
    yield paged_attention_case("mixed step: a prompt chunk of 9 rows, decode rows, padding; D=64 GQA4",
                               B([(1, 30, 9), (0, 95, 1), (2, 0, 1), (3, 33, 2)], 4, 8, 40, pad=3, seed=5), 8, 2, 64,
                               seed=6)
    yield paged_attention_case("mixed step D=96 Dv=64 GQA3 window=20 softcap",
                               B([(0, 10, 12), (1, 300, 1)], 2, 16, 40, seed=6), 6, 2, 96, dv=64, window=20,
                               softcap=20.0, seed=7)
    # the prefill kernel's tiles: long runs over several buckets, runs starting mid-bucket, GQA 7 (tiles
    # cutting tokens), windows inside a chunk, padding tiles; and the decode kernel (n_split) on the same
    yield paged_attention_case("prefill tiles: a 70-row chunk at 45, 3 decode rows, 5 padding; D=64 GQA4",
                               B([(2, 45, 70), (0, 500, 1), (1, 3, 1), (3, 64, 1)], 4, 24, 120, pad=5, seed=7), 8, 2,
                               64, seed=8)
    yield paged_attention_case("prefill tiles: qwen GQA7 two chunks (40 at 0, 33 at 100) window=50 softcap",
                               B([(1, 0, 40), (0, 100, 33)], 2, 8, 30, seed=8), 14, 2, 64, window=50, softcap=25.0,
                               seed=9)
    yield paged_attention_case("prefill tiles 16:1:2s: D=128 GQA4 a chunk of 50 at 31, a row at 0",
                               B([(0, 31, 50), (1, 0, 1)], 2, 8, 30, seed=9), 8, 2, 128, seed=10,
                               prefill_tile="16:1:2s")
    # one sequence (n_seqs 1): the prefill kernels' fixed row blocks, keys through its scattered table
    yield paged_attention_case("one sequence: a 70-row chunk at 45, 5 padding rows; qwen D=64 GQA7",
                               B([(0, 45, 70)], 1, 8, 30, pad=5, seed=11), 14, 2, 64, seed=12)
    yield paged_attention_case("one sequence: 40 rows at 100, window=50 softcap; D=128 GQA4 tile 16:1:2s",
                               B([(0, 100, 40)], 1, 8, 30, seed=12), 8, 2, 128, window=50, softcap=25.0, seed=13,
                               prefill_tile="16:1:2s")
    yield paged_attention_case("one sequence, key units of 32: a 70-row chunk at 45; qwen D=64 GQA7",
                               B([(0, 45, 70)], 1, 8, 30, pad=5, seed=11), 14, 2, 64, seed=14, prefill_units=32)
    yield paged_attention_case("decode kernel n_split=8 chunk=32 on a mixed step (a block per token)",
                               B([(2, 45, 20), (0, 500, 1), (1, 3, 1)], 3, 24, 80, pad=2, seed=10), 8, 2, 64,
                               window=100, seed=11, n_split=8, split_chunk=32)
    yield paged_attention_case("decode kernel n_split=16 on a decode batch, pos 0/31/32/700/1500",
                               B([(0, 0, 1), (1, 31, 1), (2, 32, 1), (3, 700, 1), (4, 1500, 1)], 5, 64, 400), 8, 2,
                               64, seed=1, n_split=16, split_chunk=64)
    # the grouped-query kernel (forced; D 32 fits lavapipe's 8-lane subgroups)
    yield paged_attention_case("decode batch, grouped-query kernel D=32 GQA4 pos 0/31/32/700/1500",
                               B([(0, 0, 1), (1, 31, 1), (2, 32, 1), (3, 700, 1), (4, 1500, 1)], 5, 64, 400), 8, 2,
                               32, seed=17, decode_gqa=1)
    yield paged_attention_case("decode batch, grouped-query kernel D=32 GQA7 window=300 softcap, slots out of order",
                               B([(3, 299, 1), (0, 1000, 1), (2, 5, 1)], 4, 40, 200, pad=1, seed=1), 14, 2, 32,
                               window=300, softcap=30.0, seed=18, decode_gqa=1)
    yield paged_attention_case("grouped-query kernel n_split=8 chunk=32 on a mixed step (a block per token) D=32",
                               B([(2, 45, 20), (0, 500, 1), (1, 3, 1)], 3, 24, 80, pad=2, seed=10), 8, 2, 32,
                               seed=19, n_split=8, split_chunk=32, split_group=3, decode_gqa=1)
    yield paged_attention_case("decode batch, grouped-query kernel D=64 GQA4 team_lanes=8 (two columns a lane)",
                               B([(0, 900, 1), (1, 31, 1), (2, 0, 1)], 3, 32, 100, seed=11), 8, 2, 64, seed=20,
                               decode_gqa=1, team_lanes=8)


def attention_case(name: str, T: int, n_tokens: int, pos: int, H: int, Hkv: int, D: int, n_ctx: int,
                   window: int = 0, softcap: float = 0.0, n_split: int = 0, seed: int = 0, dv: int = 0,
                   split_chunk: int = 0, prefill_tile: str = "", team_keys: int = 0,
                   prefill_mma: bool | str = False, prefill_units: int = 0, **tuning_attrs) -> Case:
    """Random q and f16 caches; cache rows at or past pos + n_tokens hold NaN (must never be read).
    ``prefill_mma`` (T > 1): False keeps the FMA kernel these cases' tolerance is for; True or a tile
    "NSG:BK" lets the matrix-unit kernel run where the device has it (test_kernel_attention.py holds it to
    MMA_TOL). ``tuning_attrs``: more of TUNING_ATTRS (decode_gqa, team_lanes ...)."""
    dv = dv or D
    g = rng(seed)
    q = g.standard_normal((T, H * D)).astype(np.float32)
    ck = (g.standard_normal((n_ctx, Hkv * D)) * 2).astype(np.float16)
    cv = g.standard_normal((n_ctx, Hkv * dv)).astype(np.float16)
    ck[pos + n_tokens:] = np.nan
    cv[pos + n_tokens:] = np.nan
    q[n_tokens:] = np.nan
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=dv, scale=1.0 / math.sqrt(D),
                 window=window, softcap=softcap)
    if n_split:
        attrs["n_split"] = n_split
    if split_chunk:
        attrs["split_chunk"] = split_chunk
    if prefill_tile:
        attrs["prefill_tile"] = prefill_tile
    if team_keys:
        attrs["team_keys"] = team_keys
    if T > 1:
        attrs["prefill_mma"] = prefill_mma
    if prefill_units:
        attrs["prefill_units"] = prefill_units
    attrs |= tuning_attrs
    n_kv = pos + n_tokens
    return Case("attention", name, [q, ck, cv], ["f32", "f16", "f16"],
                lambda: [reference(q, ck, cv, **attrs, pos=pos, n_tokens=n_tokens)], 2e-5, attrs=attrs,
                pos=pos, n_tokens=n_tokens, nbytes=2 * n_kv * Hkv * (D + dv), flops=2 * n_tokens * H * (D + dv) * n_kv)


@check("attention")
def _cases() -> Iterable[Case]:
    yield attention_case("decode llama D=64 GQA4 n_kv=1", 1, 1, 0, 8, 2, 64, 16, seed=1)
    yield attention_case("decode qwen D=64 GQA7 n_kv=300", 1, 1, 299, 14, 2, 64, 320, seed=2)
    yield attention_case("decode D=128 MHA n_kv=777 split", 1, 1, 776, 4, 4, 128, 800, seed=3)
    yield attention_case("decode gemma3 D=256 GQA2 window=50 softcap", 1, 1, 200, 4, 2, 256, 256,
                         window=50, softcap=30.0, seed=4)
    # split bookkeeping: split_chunk=64 with n_split=8 gives 64-key splits up to 512 keys on every device
    for pos, what in ((62, "1 split, 63 keys"), (63, "1 split, exactly 64 keys"),
                      (64, "2 splits, the last of 1 key"), (255, "4 full splits"),
                      (256, "5 splits, the last of 1 key"), (447, "7 full splits")):
        yield attention_case(f"decode qwen n_split=8 chunk=64 pos={pos}: {what}", 1, 1, pos, 14, 2, 64, 520,
                             n_split=8, split_chunk=64, seed=20 + pos % 7)
    yield attention_case("decode qwen n_split=8 chunk=64 n_kv=1000: 8 splits of 128, the last partial", 1, 1,
                         999, 14, 2, 64, 1024, n_split=8, split_chunk=64, seed=11)
    yield attention_case("decode qwen max context n_kv=n_ctx=4096 (every split active)", 1, 1, 4095, 14, 2,
                         64, 4096, seed=12)
    yield attention_case("decode qwen n_kv=65 of n_ctx=4096 (1 of many splits)", 1, 1, 64, 14, 2, 64, 4096,
                         seed=13)
    yield attention_case("decode D=64 GQA4 window=300 softcap n_kv=901, 5 windowed splits", 1, 1, 900, 8, 2,
                         64, 960, window=300, softcap=20.0, n_split=16, split_chunk=64, seed=14)
    yield attention_case("decode gemma3 D=256 GQA8 n_kv=501 window=400 softcap", 1, 1, 500, 16, 2, 256, 512,
                         window=400, softcap=50.0, seed=15)
    yield attention_case("decode D=128 GQA16 (two row blocks) n_kv=700", 1, 1, 699, 16, 1, 128, 720,
                         seed=16)
    yield attention_case("decode D=128 G=1 n_split=32 n_kv=100 (splits of one pass)", 1, 1, 99, 2, 2, 128,
                         128, n_split=32, seed=17)
    yield attention_case("decode D=96 Dv=64 GQA3 n_kv=333", 1, 1, 332, 6, 2, 96, 400, dv=64, seed=18)
    yield attention_case("decode D=32 GQA2 n_kv=250 (team = 8 lanes)", 1, 1, 249, 4, 2, 32, 256, seed=19)
    yield attention_case("decode D=16 GQA5 n_kv=130 n_split=4 (team = 4 lanes)", 1, 1, 129, 10, 2, 16, 160,
                         n_split=4, seed=20)
    yield attention_case("decode D=4 MHA n_kv=70 (team = 1 lane)", 1, 1, 69, 3, 3, 4, 80, seed=21)
    yield attention_case("decode llama D=64 GQA4 team_keys=4 n_split=16 chunk=64 n_kv=700 (KB 4 at one column)", 1,
                         1, 699, 8, 2, 64, 720, n_split=16, split_chunk=64, team_keys=4, seed=24)
    yield attention_case("decode D=512 GQA4 n_kv=200 softcap (team = 64 lanes, wider than a subgroup)", 1, 1,
                         199, 8, 2, 512, 210, softcap=40.0, seed=23)
    # the grouped-query kernel (one team for a KV head's rows; forced: lavapipe's 8-lane subgroups take D 32)
    yield attention_case("decode grouped-query D=32 GQA4 n_kv=1000 (2 keys a pass)", 1, 1, 999, 8, 2, 32, 1024,
                         seed=25, decode_gqa=1)
    yield attention_case("decode grouped-query D=32 GQA7 (rows padded to 8: 1 key a pass) window=300 softcap "
                         "n_split=8 chunk=64 n_kv=901", 1, 1, 900, 14, 2, 32, 960, window=300, softcap=20.0,
                         n_split=8, split_chunk=64, seed=26, decode_gqa=1)
    yield attention_case("decode grouped-query D=32 GQA2 n_split=8 chunk=64 n_kv=447 (4 keys a pass)", 1, 1, 446,
                         4, 2, 32, 520, n_split=8, split_chunk=64, seed=27, decode_gqa=1)
    yield attention_case("decode grouped-query D=16 GQA4 n_kv=1 (4 lanes)", 1, 1, 0, 8, 2, 16, 16, seed=28,
                         decode_gqa=1)
    yield attention_case("decode grouped-query D=16 GQA2 n_kv=130 n_split=4 (teams of 4 lanes, two a subgroup on "
                         "lavapipe)", 1, 1, 129, 4, 2, 16, 160, n_split=4, seed=30, decode_gqa=1)
    yield attention_case("decode grouped-query D=32 GQA3 T=7 n_tokens=6 pos=300 n_split=6 (rows of 6 tokens)", 7, 6,
                         300, 6, 2, 32, 320, n_split=6, seed=29, decode_gqa=1)
    yield attention_case("decode grouped-query D=64 GQA4 team_lanes=8 (two columns a lane) n_kv=700 window=300 "
                         "softcap", 1, 1, 699, 8, 2, 64, 720, window=300, softcap=25.0, seed=31, decode_gqa=1,
                         team_lanes=8)
    yield attention_case("decode grouped-query D=64 GQA7 team_lanes=8 (rows padded to 8: 1 key a pass) n_split=8 "
                         "chunk=64 n_kv=333", 1, 1, 332, 14, 2, 64, 400, n_split=8, split_chunk=64, seed=32,
                         decode_gqa=1, team_lanes=8)
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
    yield attention_case("prefill by the decode kernel n_split=6 T=7 n_tokens=6 pos=300 window=200 softcap",
                         7, 6, 300, 6, 2, 64, 320, window=200, softcap=25.0, n_split=6, seed=22)
    # the flash kernel at model shapes: whole 512-token chunks, chunks after earlier ones, ragged ends
    yield attention_case("prefill qwen D=64 GQA7 T=512 n_tokens=512 pos=0", 512, 512, 0, 14, 2, 64, 512, seed=30)
    yield attention_case("prefill llama D=64 GQA4 T=512 n_tokens=301 pos=700 (cache holds 700)", 512, 301, 700,
                         8, 2, 64, 1024, seed=31)
    yield attention_case("prefill D=128 GQA4 T=512 n_tokens=512 pos=512", 512, 512, 512, 8, 2, 128, 1024,
                         seed=32)
    yield attention_case("prefill D=128 MHA T=100 n_tokens=77 pos=0", 100, 77, 0, 3, 3, 128, 80, seed=33)
    yield attention_case("prefill gemma3 D=256 GQA4 T=200 n_tokens=199 pos=60 window=128 softcap", 200, 199, 60,
                         4, 1, 256, 260, window=128, softcap=30.0, seed=34)
    yield attention_case("prefill D=64 GQA7 T=16 n_tokens=1 pos=0 (one live row)", 16, 1, 0, 7, 1, 64, 16, seed=35)
    yield attention_case("prefill D=64 GQA7 T=2 n_tokens=2 pos=37", 2, 2, 37, 14, 2, 64, 40, seed=36)
    # key units (attention/units.wgsl): fixed ones starting inside a tile, rows seeing none of a unit's keys,
    # windows leaving whole units empty, padding rows; and units sized from the step's keys
    yield attention_case("prefill units of 24 D=64 GQA7 T=70 n_tokens=67 pos=40", 70, 67, 40, 14, 2, 64, 110,
                         seed=37, prefill_units=24)
    yield attention_case("prefill units of 40 D=256 window=50 softcap T=40 pos=100", 40, 40, 100, 4, 1, 256, 140,
                         window=50, softcap=30.0, seed=38, prefill_units=40)
    yield attention_case("prefill units from the keys D=128 GQA4 T=100 n_tokens=77 pos=300", 100, 77, 300, 8, 2,
                         128, 400, seed=39, prefill_units=-1)
    yield attention_case("prefill D=64 GQA1 T=65 n_tokens=65 pos=31 window=40 (window inside the chunk)", 65, 65,
                         31, 2, 2, 64, 96, window=40, softcap=10.0, seed=37)
    yield attention_case("prefill D=64 GQA4 T=33 n_tokens=33 pos=1 window=1 (each row sees itself)", 33, 33, 1,
                         4, 1, 64, 34, window=1, seed=38)
    yield attention_case("prefill D=96 Dv=64 GQA3 T=20 n_tokens=19 pos=9 (K and V widths differ)", 20, 19, 9, 6,
                         2, 96, 28, dv=64, seed=39)
    yield attention_case("prefill D=16 GQA2 T=24 n_tokens=24 pos=4 (4 key lanes)", 24, 24, 4, 4, 2, 16, 28,
                         seed=40)
    # every tile shape of the candidate list (NRG:RT:KT), at sizes that are not multiples of the tiles
    for i, tile in enumerate(("16:4:4", "32:2:4", "16:2:4", "16:2:4s", "32:1:4", "16:1:4", "16:2:2", "16:1:2",
                              "16:1:2s", "16:1:1", "8:1:1", "4:1:1")):
        d = 32 if tile in ("16:4:4", "32:2:4", "32:1:4") else 64    # these exceed lavapipe's 32 KiB at D=64
        yield attention_case(f"prefill tile {tile} D={d} GQA7 T=150 n_tokens=141 pos=93 window=120 softcap",
                             150, 141, 93, 14, 2, d, 240, window=120, softcap=25.0, seed=50 + i, prefill_tile=tile)
    yield attention_case("prefill tile 16:1:2 D=128 GQA4 T=70 n_tokens=70 pos=0", 70, 70, 0, 8, 2, 128, 70,
                         seed=60, prefill_tile="16:1:2")


@check("attention.bench", bench=True)
def _bench() -> Iterable[Case]:
    """Real model shapes: decode at long contexts (GB/s of K/V read) and a 512-token prefill."""
    yield attention_case("decode llama-1B H32/8 D64 n_kv=2048", 1, 1, 2047, 32, 8, 64, 2048, seed=1)
    yield attention_case("decode H32/8 D128 n_kv=4096", 1, 1, 4095, 32, 8, 128, 4096, seed=2)
    yield attention_case("decode qwen-0.5B H14/2 D64 n_kv=4096", 1, 1, 4095, 14, 2, 64, 4096, seed=3)
    yield attention_case("decode gemma3 H4/1 D256 n_kv=4096 window=512", 1, 1, 4095, 4, 1, 256, 4096,
                         window=512, seed=4)
    yield attention_case("prefill llama-1B T=512 H32/8 D64", 512, 512, 0, 32, 8, 64, 512, seed=5)
