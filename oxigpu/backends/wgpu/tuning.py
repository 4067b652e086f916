"""Kernel tuning as data: the GEMV splits, GEMM tiles and attention launch shapes, per device class.

The kernel modules (ops/matmul.py, ops/gemm.py, ops/attention*.py) own the mechanics: what a config
means, which configs a kernel can run, the adapter limits each must fit. This module owns the choices:
rule tables read first match first, keyed by device class, weight type and shape class (ranges of a
weight's rows n and row length k), and the constants of the cost models that pick GEMM tiles and splits.

Device classes (:func:`device_class`):

- ``mma``: a hardware GPU whose matrix units WebGPU reaches (Dawn's f16 subgroup matrices);
- ``gpu``: any other hardware GPU;
- ``cpu``: a software adapter (lavapipe, SwiftShader): correct, never fast (``backend="auto"`` runs
  numpy there), so its choices only need to be valid.

The rows were measured on one GPU (132 compute units, HBM3; the figures and how they were taken are in
docs/perf-log.md, "Kernel tuning"). They are written in shape terms, so every model of the same shapes
gets them, and the other classes share them until a measurement on another device says otherwise. What
depends most on the machine, how many workgroups run at once, is each class's ``slots``; the rows' last
entries are the generic defaults, for shapes no measurement covered.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MMA, GPU, CPU = "mma", "gpu", "cpu"
DEVICE_CLASSES = (MMA, GPU, CPU)

INF = 1 << 62


def device_class(dev: Any) -> str:
    """``mma``, ``gpu`` or ``cpu`` for a :class:`~oxigpu.backends.wgpu.device.Device` (or anything with its
    ``is_software`` and ``has_mma``)."""
    if dev.is_software:
        return CPU
    return MMA if dev.has_mma else GPU


# -- GEMV (one row: decode) -------------------------------------------------------------------------

@dataclass(frozen=True)
class GemvRule:
    """One row of a GEMV table: weights of ``types`` (None: any) with k in ``k`` and n in ``n`` (inclusive
    ranges), rows at least ``k_per_n`` times longer than the row count, and (``int8``) only where integer
    dots are allowed, take ``cfg`` (ops/matmul.py ``GemvConfig`` fields; ``persist`` counts workgroups per
    slot). Integer dots (``q8x``) apply only where the piece has an integer form; elsewhere the same split
    runs float dots."""

    types: tuple[str, ...] | None
    k: tuple[int, int]
    n: tuple[int, int]
    cfg: Mapping[str, Any]
    int8: bool = False
    k_per_n: float = 0.0

    def matches(self, qtype: str, k: int, n: int, int8: bool) -> bool:
        return ((self.types is None or qtype in self.types) and self.k[0] <= k <= self.k[1]
                and self.n[0] <= n <= self.n[1] and (int8 or not self.int8) and k >= self.k_per_n * n)


def _r(types: str | None, k: tuple[int, int] = (0, INF), n: tuple[int, int] = (0, INF), int8: bool = False,
       k_per_n: float = 0.0, **cfg: Any) -> GemvRule:
    return GemvRule(tuple(types.split()) if types else None, k, n, cfg, int8, k_per_n)


_FLOAT = "F32 F16 BF16"
_K4 = "Q4_K Q5_K Q6_K IQ4_XS"   # the 256-blocks with integer-dot pieces (Q5_K, IQ4_XS: Q4_K's rows)
_LEGACY = "Q8_0 Q4_0"      # 32-blocks with integer-dot pieces
_I8 = dict(q8x=True, ppb32=2)
BIG = (2048, 65535)        # both dimensions >= 2048, fewer rows than a vocabulary

GEMV_RULES: tuple[GemvRule, ...] = (
    # F16 rows of >= 2048: one x load serves several rows; the x index is clamped (faster than unchecked on
    # a driver without bounds checks). Rows of < 8192 with many rows (gate+up, q/k/v of 6,144) 64 lanes on 4
    # rows (q/k/v of 3,072 on 2), the widest shapes 256 lanes on 2
    _r("F16", k=(2048, 8191), n=(8192, 65535), tpr=64, r=4, gpw=2, xclamp=True),
    _r("F16", k=(4096, 8191), n=(6144, 8191), tpr=64, r=4, gpw=2, u2=True, xclamp=True),
    _r("F16", k=(2048, 4095), n=(3072, 8191), tpr=64, r=2, gpw=2, xclamp=True),
    _r("F16", k=(4096, 8191), n=(4096, 6143), tpr=128, r=2, gpw=1, xclamp=True),
    _r("F16", k=(4096, INF), n=(4096, INF), tpr=256, r=2, gpw=1, xclamp=True),
    _r("F16", k=(2048, INF), tpr=128, r=2, gpw=1, xclamp=True),
    # other float weights: one row per group; more lanes per row where rows are few or long
    _r(_FLOAT, n=(4097, INF), tpr=32, r=1, gpw=4),
    _r(_FLOAT, k_per_n=4, tpr=128, r=1, gpw=1),
    _r(_FLOAT, tpr=64, r=1, gpw=2),
    # integer dots, both dimensions >= 2048. Wide outputs (n >= 8192, gate+up): x staged once per
    # workgroup (xs), several rows per group, so each staged x serves many weight rows
    _r("Q4_K Q5_K IQ4_XS", k=(2048, 2048), n=(8192, 65535), int8=True, tpr=32, r=8, gpw=4, xs=True, **_I8),
    _r("Q6_K Q8_0 Q4_0", k=(2048, 2048), n=(8192, 65535), int8=True, tpr=32, r=4, gpw=4, xs=True, **_I8),
    _r("Q8_0", k=(2048, INF), n=(8192, 65535), int8=True, tpr=32, r=4, gpw=8, xs=True, **_I8),
    _r("Q4_0", k=(2048, INF), n=(8192, 65535), int8=True, tpr=16, r=4, gpw=16, xs=True, **_I8),
    # ... K-quants on long rows: fewer workgroups than row blocks, each staging x once for several
    _r(_K4, k=(2048, INF), n=(8192, 65535), int8=True, tpr=32, r=8, gpw=4, xs=True, persist=4, **_I8),
    # long rows (k >= 8192, ffn_down): 32-blocks quantize x by a dispatch (256 lanes on 4 rows where outputs are
    # >= 4096; outputs of 2048 lost with them: docs/perf-log.md); K-quants stage it. The K-quant
    # rows here and the q/k/v ones below take one piece a step: the same single-stream speed as two, and
    # decode batches (which keep the one-row steps) then hold 4 weight rows a group, not 2 (docs/perf-log.md)
    _r(_LEGACY, k=(8192, INF), n=(4096, 65535), int8=True, tpr=256, r=4, gpw=1, u2=True, xq=True, **_I8),
    _r(_LEGACY, k=(8192, INF), n=BIG, int8=True, tpr=64, r=1, gpw=2, xq=True, **_I8),
    _r(_K4, k=(8192, INF), n=(4096, 8191), int8=True, tpr=32, r=2, gpw=8, q8x=True, xs=True),
    _r(_K4, k=(8192, INF), n=BIG, int8=True, tpr=32, r=1, gpw=8, q8x=True, xs=True),
    # the rest of the >= 2048 square-ish shapes (q/k/v, attention output): x staged per workgroup
    _r("Q4_K", k=(2048, INF), n=(2048, 3199), int8=True, tpr=32, r=1, gpw=8, piece="q4_k2", xs=True, **_I8),
    _r(_LEGACY, k=(2048, INF), n=(6144, 65535), int8=True, tpr=32, r=2, gpw=8, u2=True, xs=True, **_I8),
    _r(_LEGACY, k=(2048, INF), n=BIG, int8=True, tpr=32, r=1, gpw=8, u2=True, xs=True, **_I8),
    _r(_K4, k=(2048, INF), n=(6144, 65535), int8=True, tpr=32, r=2, gpw=8, xs=True, **_I8),
    _r(_K4, k=(2048, INF), n=BIG, int8=True, tpr=32, r=1, gpw=8, xs=True, **_I8),
    # 32-block gate+up of rows under 2048: integer dots pay once x is staged per workgroup (Q5_0, paired: one
    # row a group, 4 pieces a block)
    _r("Q5_0", n=(8192, 65535), int8=True, tpr=32, r=1, gpw=4, xs=True, q8x=True, ppb32=4),
    _r("Q8_0 Q4_0", n=(8192, 65535), int8=True, tpr=16, r=2, gpw=8, xs=True, **_I8),
    # few rows (n < 3200): 64 lanes on one row keep more compute units busy; float dots (integer ones
    # moved small models' logits past the int8 parity bound for little gain)
    # ... of rows 4x as long as they are many (a narrow model's ffn_down): 128 lanes a row
    _r("Q4_K", k=(0, 6143), n=(0, 3199), k_per_n=4, tpr=128, r=1, gpw=1, piece="q4_k2", ppb32=2, u2=True),
    _r(None, k=(0, 6143), n=(0, 3199), k_per_n=4, tpr=128, r=1, gpw=1, ppb32=2),
    _r("Q4_K", n=(0, 3199), tpr=64, r=1, gpw=2, piece="q4_k2", ppb32=2, u2=True),
    _r(None, n=(0, 3199), tpr=64, r=1, gpw=2, ppb32=2),
    # K-quants of rows under 2048 (or vocabulary-sized outputs): integer dots. Vocabularies over rows of
    # >= 2048 take one piece a step: decode batches (which keep the one-row steps) then hold one piece's
    # weights of their 4 rows in registers, not two (faster at 16 rows, the single stream as fast:
    # docs/perf-log.md, twelfth session)
    _r(_K4, k=(2048, INF), n=(65536, INF), int8=True, tpr=32, r=4, gpw=4, q8x=True),
    _r(_K4, n=(65536, INF), int8=True, tpr=32, r=4, gpw=4, u2=True, q8x=True),
    _r(_K4, n=(8192, INF), int8=True, tpr=32, r=2, gpw=4, q8x=True, xq=True),
    _r("Q6_K", int8=True, tpr=64, r=2, gpw=2, q8x=True),
    _r("Q4_K Q5_K IQ4_XS", int8=True, tpr=32, r=1, gpw=4, q8x=True, xq=True),
    # vocabulary-sized 32-block outputs: x quantized once by a dispatch
    _r("Q8_0", n=(65536, INF), int8=True, tpr=32, r=1, gpw=4, xq=True, **_I8),
    # generic defaults: integer dots on long rows and vocabulary-sized outputs where the piece has them
    _r(None, n=(65536, INF), int8=True, tpr=32, r=4, gpw=4, **_I8),
    _r(None, k=(2048, INF), n=(8192, INF), int8=True, tpr=32, r=4, gpw=4, **_I8),
    _r("Q4_K", n=(8192, INF), tpr=32, r=4, gpw=4, ppb32=2, u2=True),
    _r(None, n=(8192, INF), tpr=32, r=4, gpw=4, ppb32=2),
    _r("Q4_K", k=(8192, INF), tpr=64, r=4, gpw=2, ppb32=2),
    _r("Q4_K", tpr=32, r=2, gpw=4, ppb32=2),
    _r(None, k=(2048, INF), int8=True, tpr=64, r=2, gpw=2, **_I8),
    _r(None, tpr=64, r=2, gpw=2, ppb32=2),
)
"""The GEMV split per weight type and shape, first match first (ops/matmul.py ``gemv_config``)."""


# -- GEMM (several rows: prefill) ---------------------------------------------------------------------

@dataclass(frozen=True)
class GemmTuning:
    """The GEMM choices' constants (ops/gemm.py ``gemm_shader``, ``tile_config``, ``mma_tile``)."""

    tiled_min_rows: int = 33
    """Fewer rows keep gemm_q.wgsl's fixed 32 x 64 tile, which wastes less of itself."""
    short_rows: int = 64
    """Chunks of at most this many rows take 64-row register tiles (tm 4)."""
    f32_tiles: tuple[tuple[Mapping[str, int], float], ...] = ((dict(tm=8, tn=8, bk=16, loaders=256), 1.0),
                                                              (dict(tm=8, tn=4, bk=16, loaders=256), 0.9))
    """The f32 kernel's tiles and their rates relative to ``fma_rate``."""
    q8_tiles: tuple[tuple[Mapping[str, int], float], ...] = ((dict(tm=8, tn=8, loaders=128, nb=2), 1.0),
                                                             (dict(tm=8, tn=4, loaders=256, nb=2), 0.9))
    """The integer-dot kernel's tiles (8 x 8 with 128 loaders: 256 would leave too few registers for its
    int and float accumulators) and their rates relative to ``q8_rate``."""
    fma_rate: float = 7.6e10
    """FMAs per second of one 8 x 8 f32 workgroup."""
    q8_rate: float = 1.75 * 7.6e10
    """Multiply-adds per second of one 8 x 8 integer-dot workgroup."""
    max_splits: int = 4
    min_split_k: int = 256
    """Split-k takes at most ``max_splits`` parts of at least ``min_split_k`` inner elements each."""
    split_margin: float = 0.85
    """What a split or narrower tile must win by in the cost model (``q8_unsplit_margin``: the integer-dot
    kernel's unsplit narrower tile)."""
    q8_unsplit_margin: float = 0.95
    red_bytes_s: float = 2e12
    red_fixed_s: float = 4e-6
    """The split-k reduction pass: bytes per second over its partial sums and output, plus a dispatch."""
    mma_tiles: tuple[tuple[Mapping[str, int], float], ...] = ((dict(tm=8, tn=8, sn=4), 67.0),
                                                              (dict(tm=8, tn=4, sn=2), 51.0),
                                                              (dict(tm=4, tn=4, sn=2), 44.0))
    """The matrix-unit kernel's tiles (128 x 128, 128 x 64, 64 x 64) with their TFLOP/s where they fill
    the GPU: larger tiles read each x tile from fewer workgroups but leave more compute units idle on
    narrow outputs, which the cost model weighs."""
    mma_k0: float = 64.0
    """The matrix-unit kernel's per-workgroup cost outside its k loop, in k: a workgroup over k inner
    elements runs at k / (k + mma_k0) of its rate, relative to k = 4096."""
    mma_margin: float = 0.95
    mma_bk: int = 64
    """k per step of the matrix-unit kernel where it fits (half the barriers of 32)."""
    mma_q8_min_tflops: float = 30.0
    """Quantized weights take the matrix units where ``mma_tile`` expects at least this (the integer-dot
    kernel's rate on the same shapes is 19-37); F16 weights always do."""
    mma_half_types: tuple[str, ...] = ()
    """Weight types the matrix-unit kernel dequantizes in f16 arithmetic (ops/gemm.py ``HALF_TYPES``)."""
    mma_min_rows: int = 0
    """Chunks of fewer than ``tiled_min_rows`` rows take the matrix units from this many rows (0: never)."""
    mma_decode: tuple[DecodeTile, ...] = ()
    """Decode batches (``mma_min_rows`` to ``short_rows`` rows) on the matrix units take the first matching
    rule's tile and split-k instead of the cost model's, which rates tiles by their prefill throughput: at
    these sizes the weight staging, not the products, bounds them, and split-k spreads it over more compute
    units (docs/perf-log.md, "Decode batches")."""
    mma_raw16: bool = True
    """Q8_0 / Q5_0 / Q4_0 weights on the matrix units read as 16-byte words (TileConfig.raw16): 2-3 loads a
    32-weight unit instead of 5-9 (docs/perf-log.md, ninth session)."""
    mmv_types: tuple[str, ...] = ()
    """Weight types whose ``mma_over_gemv`` matmuls of up to 16 rows take the decode-batch matrix-unit kernel
    (ops/gemm.py ``MMV_TYPES``, gemm_mmv.wgsl) instead of the tiled one."""
    mmv_wide: int = 65536
    mmv_min_rows: int = 9
    """...and so do ``mmv_min_rows``-16 rows of weights of at least ``mmv_wide`` rows (a vocabulary's LM head)
    whatever their k."""
    mmv_fill: float = 0.5
    """...split k until its workgroups make this share of ``slots`` (ops/gemm.py ``mmv_splits``)."""
    mma_over_gemv: tuple[DecodeTile, ...] = ()
    """Matmuls of 2 to ``Tuning.gemv_rows`` rows that take the matrix units with the first matching rule's
    tile instead of the multi-row GEMV, where measured faster (one weight per matmul: matmul_multi's
    mixed-type GEMV keeps its rows)."""


@dataclass(frozen=True)
class DecodeTile:
    """A decode-batch tile rule (``GemmTuning.mma_decode``): GEMMs of m rows in ``m``, n weight rows (gate
    and up together for the GLU) in ``n`` and k in ``k`` (inclusive ranges), the GLU ones (``glu`` True),
    the others (False) or both (None), take ``tile`` (TileConfig fields, ``splits`` capped so that each
    split keeps ``min_split_k``)."""

    tile: Mapping[str, int]
    glu: bool | None = None
    m: tuple[int, int] = (0, INF)
    n: tuple[int, int] = (0, INF)
    k: tuple[int, int] = (0, INF)

    def matches(self, m: int, n: int, k: int, glu: bool) -> bool:
        return ((self.glu is None or self.glu == glu) and self.m[0] <= m <= self.m[1] and self.n[0] <= n <= self.n[1]
                and self.k[0] <= k <= self.k[1])


# -- attention ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DecodeTuning:
    """The split-KV decode attention's launch shape (ops/attention.py ``decode_config``)."""

    lanes: int = 256
    """Invocations per workgroup (rows x key slices x team lanes)."""
    slices: int = 4
    """Key slices per row the row count is chosen for (fewer rows, more slices: more keys in flight)."""
    rows: int = 8
    """Most query rows per workgroup (larger GQA groups take several row blocks)."""
    key_slices: int = 0
    """Key slices per row (0: as many as the lanes allow). Every plan must take the same (a row's sums
    depend on it), the single stream's included."""
    chunk_passes: int = 4
    """Workgroup passes per split the split count is planned for on long contexts: a pass costs about
    half of the cross-workgroup merge."""
    wg_per_slot: int = 2
    """Workgroups long contexts spread over, per slot (more per compute unit only queue)."""
    max_splits: int = 256
    long_keys: int = 16384
    """Caches of at least this many keys a sequence (the plan's n_ctx) take the long-context shape where a
    head fills a 32-lane team: every query row of a KV head in one workgroup, transposed team sums (faster
    at 32k keys, slower at 512; docs/perf-log.md, fifteenth session). Every plan of one n_ctx takes the
    same key slices, so a row's sums stay the same in all of them."""
    gqa: tuple[int, ...] = (64, 128)
    """Head dims that take the grouped-query kernel (ops/attention_gqa.py: one team for a KV head's query
    rows) where the adapter's subgroups span its team (D / 4 lanes up to 32, then two columns a lane).
    256-wide heads keep the per-row-team kernel (untimed on the new one)."""
    gqa_max_rows: int = 4
    """...where a KV head's query rows, padded to a power of two, are at most this many: 8 padded rows (GQA 6
    and 7 over two KV heads) were slower on it (fewer keys a team pass, fewer workgroups; perf log)."""
    gqa_lanes: int = 128
    """...its invocations per workgroup (key slices of one team each)."""
    gqa_wg_per_slot: int = 4
    """...its workgroups long contexts spread over, per slot."""
    gqa_chunk_passes: int = 4
    """...its workgroup passes per split the split count is planned for."""
    gqa_own_reg: bool = True
    """...the step's own key from registers in the pass that holds it, instead of written, a storage
    barrier, and read back (attention_decode_gqa.wgsl OWN_REG; the same bits, one barrier fewer; perf log)."""
    gqa_min_keys: int = 0
    """...its fewest keys per split (0: one workgroup pass): short contexts in fewer splits, less to merge."""
    spw_fill: float = 1.5
    """A batch's step takes several splits per workgroup while its workgroups still make this many per slot
    (fewer were slower at a 4-row batch; docs/perf-log.md, eleventh session)."""


@dataclass(frozen=True)
class PrefillTuning:
    """The prefill attention kernels' tiles (ops/attention_prefill.py, ops/attention_mma.py)."""

    candidates: tuple[str, ...] = ("16:4:4", "16:2:4", "32:2:4", "16:2:4s", "32:1:4", "16:1:4", "16:2:2",
                                   "16:1:2", "16:1:2s", "16:1:1", "8:1:2", "8:1:1", "4:1:1")
    """FMA kernel tiles NRG:RT:KT (``s``: K and V share one buffer) in order of preference; the first that
    fits the workgroup memory and ``reg_budget`` is taken, but 64-row tiles that would leave compute units
    idle (fewer workgroups than slots)."""
    reg_budget: int = 200
    """Most 32-bit registers per thread the estimate may reach (spills go to slow local memory)."""
    decode_rows: int = 16
    """Steps of one sequence with at most this many rows (a speculative verification's k + 1) run the decode
    kernel, its rows' keys split over many workgroups: the prefill kernels' row blocks leave most of the GPU
    idle there (one block per KV head; docs/perf-log.md, ninth and seventeenth sessions). A row then sums as
    a one-row step does, so a verification's logits equal plain decoding's where its matmuls are GEMVs."""
    mma_tiles: tuple[tuple[int, int], ...] = ((4, 32), (4, 64))
    """Matrix-unit kernel tiles (subgroups, keys per tile), in order of preference; the kernel is taken
    where its 64-row blocks give at least ``slots`` workgroups (below that the FMA kernel's smaller tiles
    spread wider)."""
    mma_deep_keys: int = 1024
    """Below ``slots`` row blocks, one sequence's chunks whose keys reach this many still take the
    matrix-unit kernel: each block's longer key loop outweighs the idle compute units (qwen 0.5B's 512-row
    chunks: FMA 4 % ahead at 512 keys, the matrix units 5 % ahead at 1024, 36 % at 4608; docs/perf-log.md,
    fifth session)."""
    mma_deep_dim: int = 128
    """...for head dims up to this: gemma3 270M's 256-dim global layers gained nothing at 4608 keys."""
    max_units: int = 8
    """One sequence's chunks with many keys (OpKernel.deep) cut each row block's keys into at most this many
    units, a workgroup each, merged after (shaders/attention_merge_units.wgsl; the partials' scratch grows
    with it): a 512-row chunk of a model with few KV heads has too few row blocks to keep the GPU busy."""
    unit_fill: int = 2
    """...of keys enough that the units' workgroups make this many per slot: resident at once, one wave
    (a second wave costs a whole unit's time again; docs/perf-log.md, "Prefill attention key units")..."""
    unit_long_keys: int = 4096
    """...and at most this many keys a unit. Plans whose row blocks alone fill the GPU take units only for
    steps of twice this many keys or more: below that the partials and the merge cost more than the
    extra workgroups give (measured in the same perf-log entry)."""


@dataclass(frozen=True)
class Tuning:
    """Everything one device class's kernels choose from."""

    device: str
    slots: int
    """Workgroups of the big kernels that run at once (one per compute unit of the measured GPU): split-k,
    persistent GEMV launches and the attention kernels' spread are planned for it. WebGPU does not report
    a compute-unit count, so it is a per-class figure."""
    gemv: tuple[GemvRule, ...] = GEMV_RULES
    gemv_rows: int = 16
    """Matmuls of at most this many rows (decode batches) run as GEMVs, reading each weight once for
    all rows; more rows take the GEMM."""
    gemv_acc: int = 16
    """Most sums a GEMV lane accumulates (R weight rows x XR x rows)."""
    gemv_xr: int = 4
    gemv_wr: int = 4
    gemv_wr_u2: int = 2
    """The integer-dot multi-row GEMV's group: x rows, weight rows (two-piece steps past gemv_xr rows:
    ``gemv_wr_u2``), as measured over 8 and 16 (docs/perf-log.md, "Decode batches")."""
    gemv_tsum_rows: int = 2
    """GEMVs of at least this many x rows sum their groups' lanes by the transposed butterfly (gemv/reduce_sg.wgsl
    TSUM: the same bits, fewer shuffles; 1: the one-row GEMV too)."""
    gemv_wide_rows: int = 65536
    """Weights of at least this many rows (a vocabulary: the LM head) keep ``gemv_wr`` rows a group with
    two-piece steps too, where their one-row rule takes them: more weight rows a group halve the x reads
    per weight, which bound these GEMVs at 16 rows (docs/perf-log.md, sixth session)."""
    gemm: GemmTuning = field(default_factory=GemmTuning)
    decode: DecodeTuning = field(default_factory=DecodeTuning)
    prefill: PrefillTuning = field(default_factory=PrefillTuning)


_MMA_GEMM = GemmTuning(
    # decode batches of 17-64 rows: a 32 x 128 tile (one row of two subgroups) wastes less of itself than
    # the 64-row ones. Its rate is an estimate (each staged weight tile serves 32 rows, a quarter of the
    # 128-row tile's), not a measurement: dev/bench_batch.py times it.
    mma_tiles=(*GemmTuning().mma_tiles, (dict(tm=2, tn=8, sn=4), 30.0)),
    # decode batches' tiles (docs/perf-log.md, "Decode batches, round 2"): the GLU split 4 ways (its gate
    # and up sums paired in the reduction) in 32 x 64 tiles up to 32 rows, 64 x 64 past; 64 x 64 split 4
    # ways for outputs of <= 4096 columns, 8 ways for wider ones
    # Q4_K / Q6_K staged through the f16-arithmetic loaders (16-byte loads for Q4_K): faster at every size
    # measured, prefill included (docs/perf-log.md, "Decode batches, round 2")
    mma_half_types=("Q4_K", "Q6_K"),
    # ... of which Q4_K and Q6_K on gemm_mmv.wgsl: 16 x 16 tiles of each subgroup's own rows, x staged once
    # for 128, one dispatch (docs/perf-log.md, eighteenth and nineteenth sessions)
    mmv_types=("Q4_K", "Q6_K"),
    # 9-16 decode rows of the large weights (both sides >= 4096) on the matrix units, 32 x 64 tiles split 4
    # ways: faster than the multi-row GEMV there since the loaders read ahead; narrower weights keep the GEMV
    # (docs/perf-log.md, eighth session)
    mma_over_gemv=(DecodeTile(dict(tm=2, tn=4, sn=2, splits=4), m=(9, 16), n=(4096, INF), k=(4096, INF)),),
    mma_min_rows=17, mma_decode=(DecodeTile(dict(tm=2, tn=4, sn=2, splits=4), glu=True, m=(0, 32)),
                                 DecodeTile(dict(tm=4, tn=4, sn=2, splits=4), glu=True),
                                 DecodeTile(dict(tm=4, tn=4, sn=2, splits=4), n=(0, 4096)),
                                 DecodeTile(dict(tm=4, tn=4, sn=2, splits=8))))

TUNING: dict[str, Tuning] = {c: Tuning(c, slots=132, gemm=_MMA_GEMM if c == MMA else GemmTuning())
                             for c in DEVICE_CLASSES}
"""Per device class. Only the ``mma`` class's GPU has been measured; ``gpu`` and ``cpu`` share its rows
(the ``mma`` class adds the matrix-unit GEMM of decode batches)."""


def tuning(device: str | Any = GPU) -> Tuning:
    """The table of a device class name, or of a device (:func:`device_class`)."""
    return TUNING[device if isinstance(device, str) else device_class(device)]


@dataclass(frozen=True)
class DeviceTraits:
    """What the kernel choices read from a device, for choosing without one (tests, `oxigpu kernels
    --source`): :meth:`of` a live :class:`~oxigpu.backends.wgpu.device.Device`, or written out."""

    is_software: bool = False
    has_mma: bool = False
    int8_dots: bool = True
    has_f16: bool = True
    has_subgroups: bool = True
    limits: Mapping[str, int] = field(default_factory=lambda: {
        "max-compute-workgroup-storage-size": 49152, "max-compute-invocations-per-workgroup": 1024,
        "max-storage-buffers-per-shader-stage": 16})
    max_storage_binding: int = (1 << 31) - 4
    storage_align: int = 256

    @classmethod
    def of(cls, dev: Any) -> DeviceTraits:
        return cls(dev.is_software, dev.has_mma, dev.int8_dots, dev.has_f16, dev.has_subgroups, dict(dev.limits),
                   dev.max_storage_binding, dev.storage_align)
