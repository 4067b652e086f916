"""``matmul`` (y = x @ W.T + bias) and its fused forms (``matmul_add``, ``matmul_multi``, ``matmul_glu``)
on quantized GGUF weights: GEMV for one row, tiled GEMM for more.

Both shaders read the raw GGUF blocks through the same ``shaders/quant/<type>.wgsl`` snippet. A weight
larger than the device's storage-binding limit is bound as several row ranges of the same buffer, one
dispatch each; every range writes its own output columns.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ....errors import DeviceError
from ....quant import dequantize, get_type
from ....quant.samples import sample_weights
from ..device import Binding, Device, Dispatch, workgroups_for
from ..kernel import Case, OpKernel, Shape, check, register
from ..layout import SPAN_PAD
from ..tuning import GPU, device_class, tuning
from ._common import f32_lit
from .elementwise import Glu
from .gemm import (
    Q8_TYPES,
    GemmKernel,
    gemm_shader,
    glu_gemm,
    half_dequant,
    over_gemv,
    q8_round,
    q8_tie_free,
    scratch_buffer,
)
from .norm import RmsNorm
from .quant_grid import grid_binds, has_grid


def matmul_tol(m: int, k: int) -> float:
    """max |err| / max |ref| allowed: every GEMV/GEMM path multiplies exact f32 weights in f32, whose
    accumulation over k products stays within ~2e-7 sqrt(k)."""
    return 2e-7 * math.sqrt(k)

TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0")
"""Weight types with a WGSL dequant snippet (every registered type: oxigpu.quant.SUPPORTED)."""


GEMV_PIECES = {"F32": "f32", "F16": "f16", "Q8_0": "q8_0", "Q4_0": "q4_0", "Q5_0": "q5_0",
               "Q4_K": "q4_k", "Q5_K": "q5_k", "Q6_K": "q6_k", "IQ4_XS": "iq4_xs"}
"""Types with a specialized GEMV piece file (shaders/gemv/<name>.wgsl); the rest use the dq8 one."""

PIECE_TYPES = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0", "q5_0": "Q5_0",
               "q4_k": "Q4_K", "q4_k2": "Q4_K", "q5_k": "Q5_K", "q6_k": "Q6_K", "iq4_xs": "IQ4_XS"}
"""Every specialized piece file and the type it reads (variants included); dq8 reads any type, q32 any of
``Q8_TYPES``."""

Q8X_PIECES = {"q4_k": lambda r, p: 2 * (r // 64) + r % 32 // 16,
              "q4_k2": lambda r, p: 4 * (r // 64) + r % 32 // 8,
              "q5_k": lambda r, p: 2 * (r // 64) + r % 32 // 16,
              "q6_k": lambda r, p: 4 * (r // 128) + r % 32 // 8,
              "q8_0": lambda r, p: r // 32 * p + r % 32 // (32 // p),
              "q4_0": lambda r, p: r // 32 * p + r % 16 // (16 // p),
              "q5_0": lambda r, p: r // 32 * p + r % 16 // (16 // p),
              "iq4_xs": lambda r, p: r // 32,
              "q32": lambda r, p: r // 32}
"""Piece files with an integer-dot form (``<piece>_qdot``: x quantized to int8 per piece), and the piece
(x quantization group) of element r of a 256-block with p = PPB32 pieces per 32-block, from the piece
file's ``gx``. ``q32`` is the generic one: any type with an integer-dot GEMM loader (``Q8_TYPES``), one
32-element sub-block per piece."""
TABLE_PIECES = {"iq4_xs"}
"""Pieces that look up a codebook, staged in workgroup memory (shaders/gemv/table_true.wgsl)."""


def piece_elems(piece: str, ppb32: int = 2) -> int:
    """Elements of x per piece (one int8 quantization group) of a Q8X_PIECES piece file."""
    return 256 // (int(Q8X_PIECES[piece](np.arange(256), ppb32).max()) + 1)


def xq_words(piece: str, ppb32: int, k: int) -> int:
    """Words of a row of k values of x quantized once for ``piece`` (gemv_q.wgsl: PX int8 words, a scale
    and an x^2 sum per piece)."""
    e = piece_elems(piece, ppb32)
    return k // e * (e // 4 + 2)


def q8x_round(x: np.ndarray, piece: str, ppb32: int = 2) -> np.ndarray:
    """The numpy twin of the q8x GEMV's x (common/q8.wgsl ``xquant``), float64: each piece's values
    rounded as ops/gemm.py ``q8_round`` rounds a group."""
    x = np.asarray(x, np.float32)
    e = np.arange(x.shape[-1])
    group = Q8X_PIECES[piece]
    order = np.argsort(e // 256 * 64 + group(e % 256, ppb32), kind="stable")
    per = piece_elems(piece, ppb32)
    out = np.empty(x.shape, np.float64)
    out[..., order] = q8_round(x[..., order], per)
    return out

MIXED_STORAGE = 10
"""Storage bindings of a mixed-type GEMV (the single-type one uses 7: WebGPU's default limit is 8)."""


@dataclass(frozen=True)
class GemvConfig:
    """How the GEMV splits work: TPR lanes per group of R rows, GPW groups per workgroup.

    ``piece`` names shaders/gemv/<piece>.wgsl; ``ppb32`` is the pieces per 32-element block of the
    Q4_0/Q5_0/Q8_0 piece files; ``magic`` converts small ints to f32 by exponent bits (gemv/common.wgsl);
    ``u2`` takes two pieces per loop step (both pieces' loads in flight before either is reduced);
    ``q8x`` quantizes each piece's x to int8 and reduces rows by packed integer dots (Q8X_PIECES only);
    ``xq`` (with q8x) does that quantization once, in a dispatch before the GEMV (gemv_q.wgsl quantize_x);
    ``xs`` (with q8x) once per workgroup, into workgroup memory (gemv_q.wgsl stage_x);
    ``xclamp`` clamps x's index into its array (gemv_q.wgsl xv): see tuning.py's F16 rows;
    ``persist`` (> 0, one weight type) launches at most that many workgroups, each taking several
    workgroups' rows in turn (gemv_q.wgsl PERSIST): with ``xs``, x is staged once per launched workgroup.
    """

    tpr: int = 32
    r: int = 2
    gpw: int = 4
    piece: str = ""
    ppb32: int = 1
    magic: bool = True
    u2: bool = False
    q8x: bool = False
    xq: bool = False
    xs: bool = False
    xclamp: bool = False
    persist: int = 0


def gemv_config(qtype: str, k: int, n: int, int8: bool = True, device: str = GPU) -> GemvConfig:
    """The GEMV split for a weight of n rows of k elements: the first row of the device class's table
    (tuning.py ``GEMV_RULES``) that matches; ``int8``: integer dots allowed (``Device.int8_dots``)."""
    t = tuning(device)
    rule = next(r for r in t.gemv if r.matches(qtype, k, n, int8))
    cfg = dict(rule.cfg)
    # types without a piece file: integer dots through their GEMM loader (q32), float ones through dq8
    cfg.setdefault("piece", GEMV_PIECES.get(qtype) or ("q32" if cfg.get("q8x") and qtype in Q8_TYPES else "dq8"))
    if cfg.get("persist"):
        cfg["persist"] *= t.slots
    if cfg.get("q8x") and cfg["piece"] not in Q8X_PIECES:
        cfg["q8x"] = False
    return GemvConfig(**cfg)


def gemv_rows_code(r: int, xr: int, multi: bool) -> dict[str, str]:
    """gemv_q.wgsl's generated rows_dot blocks for R weight rows and XR x rows: the accumulators (a<j R +
    r> of x row j, weight row r; ss<j> its x^2 sum), one loop step and one two-piece (U2) step. Each x
    row's piece is loaded, then reduced against every weight row, so a row's sums follow the
    single-row order whatever XR is; with one x row (not ``multi``) the x row index is the constant 0."""
    ind = " " * 6
    decl = ["  " + " ".join(f"var a{i} = 0.0;" for i in range(r * xr)),
            "  " + " ".join(f"var ss{j} = 0.0;" for j in range(xr))]
    step, u2 = [], []
    for j in range(xr):
        row = f"xr_of(m0, {j}u)" if multi else "0u"
        acc = [f"a{j * r + k}" for k in range(r)]
        step += [f"{{ let xl = xpiece(s, b, i, p, {row}); let xs = xl.xs; let ys = xl.xq; ss{j} += xl.ss;"]
        step += [f"  {a} += rdot(s, w{k} + o, i, xs, ys);" for k, a in enumerate(acc)] + ["}"]
        u2 += [f"{{ let xl = xpiece(s, b, i, p, {row}); let xm = xpiece(s, c, j, q, {row});",
               f"  let xs = xl.xs; let ys = xl.xq; let xt = xm.xs; let yt = xm.xq; ss{j} += xl.ss + xm.ss;"]
        u2 += [f"  {a} += rdot(s, w{k} + o, i, xs, ys) + rdot(s, w{k} + e, j, xt, yt);"
               for k, a in enumerate(acc)] + ["}"]
    accs = [f"a{i}" for i in range(r * xr)] + [f"ss{j}" for j in range(xr)]
    return {"ACC_DECL": "\n".join(decl), "STEP": "\n".join(ind[:4] + x for x in step),
            "U2_STEP": "\n".join(ind + x for x in u2), "ACC_LIST": ", ".join(accs)}


def gemv_tsum_code(na: int) -> str:
    """gemv/reduce_sg.wgsl's TSUM_CODE: a transposed butterfly over the NA (a power of two) sums of a group.
    Level m (1, 2, 4, .. while m < c, the lanes the shuffles reach) pairs value 2j with 2j + 1 and each lane
    keeps the one whose index bit matches its lane bit, taking its partner's copy: NA/2 + NA/4 + .. shuffles
    instead of NA a level (16 against 80 for 16 sums on 32 lanes). Each value is summed in the pairs of the
    plain butterfly, so the totals are bit for bit the same. Then lane q = gl % c holds the totals of values
    q % w + w j (w = min(c, NA)) and writes them where the plain form's lane 0 wrote all."""
    if na < 2 or na & (na - 1):
        return ""
    out = ["    let q = gl % c;", "    " + " ".join(f"var u{i} = v[{i}];" for i in range(na))]
    n, m = na, 1
    while n > 1:
        n //= 2
        out += [f"    if ({m}u < c) {{", f"      let h = (q & {m}u) != 0u;"]
        out += [f"      u{j} = select(u{2 * j}, u{2 * j + 1}, h) + subgroupShuffleXor(select(u{2 * j + 1}, "
                f"u{2 * j}, h), {m}u);" for j in range(n)]
        out += ["    }"]
        m *= 2
    out += [f"    for (var m = {na}u; m < c; m <<= 1u) {{ u0 += subgroupShuffleXor(u0, m); }}",
            f"    let w = min(c, {na}u);",
            "    if (q < w) {"]
    out += [f"      if ({j}u * w < {na}u) {{ red[(grp * NV + q + {j}u * w) * TPR + gl / c] = u{j}; }}"
            for j in range(na)]
    out += ["    }"]
    return "\n".join(out)


def gemv_wrows_code(pieces: Sequence[str], r: int, xr: int, u2: bool) -> str:
    """gemv_q.wgsl's WROWS for the multi-row integer-dot GEMV: ``rows_dot_w<slot>`` per slot's piece. Each
    step loads the R weight rows' pieces once (``<piece>_wload``; both steps' with U2) and reduces them
    against each of the XR x rows (``<piece>_wdot``) in the single-row order: a row's sums, bit for bit,
    those of the row alone (the same lanes, pieces, steps and expressions as ``<piece>_qdot``)."""
    out = []
    for sl, pc in enumerate(pieces):
        rows = [f"a{j * r + k}" for j in range(xr) for k in range(r)]
        body = [f"fn rows_dot_w{sl}(s: u32, c0: u32, gl: u32, m0: u32) -> Partial {{",
                "  " + " ".join(f"let w{k} = row_at(s, slot_row(c0, {k}u));" for k in range(r)),
                "  " + " ".join(f"var {a} = 0.0;" for a in rows),
                "  " + " ".join(f"var ss{j} = 0.0;" for j in range(xr)),
                "  let pp = ppb(s);", "  let np = D.k / qk(s) * pp;", "  var p = gl;"]
        if u2:
            body += ["  for (; p + TPR < np; p += 2u * TPR) {", "    let q = p + TPR;",
                     "    let b = p / pp; let i = p % pp; let c = q / pp; let j = q % pp;",
                     "    let o = b * qb(s); let e = c * qb(s);"]
            body += [f"    let u{k} = {pc}_wload(s, w{k} + o, i); let v{k} = {pc}_wload(s, w{k} + e, j);"
                     for k in range(r)]
            for j in range(xr):
                body += [f"    {{ let xl = xpiece(s, b, i, p, xr_of(m0, {j}u)); let xm = xpiece(s, c, j, q, "
                         f"xr_of(m0, {j}u)); ss{j} += xl.ss + xm.ss;"]
                body += [f"      a{j * r + k} += {pc}_wdot(u{k}, xl.xq) + {pc}_wdot(v{k}, xm.xq);" for k in range(r)]
                body += ["    }"]
            body += ["  }"]
        body += ["  for (; p < np; p += TPR) {", "    let b = p / pp; let i = p % pp; let o = b * qb(s);"]
        body += [f"    let u{k} = {pc}_wload(s, w{k} + o, i);" for k in range(r)]
        for j in range(xr):
            body += [f"    {{ let xl = xpiece(s, b, i, p, xr_of(m0, {j}u)); ss{j} += xl.ss;"]
            body += [f"      a{j * r + k} += {pc}_wdot(u{k}, xl.xq);" for k in range(r)]
            body += ["    }"]
        body += ["  }", f"  return Partial(array<f32, NVA>({', '.join(rows + [f'ss{j}' for j in range(xr)])}));", "}"]
        out.append("\n".join(body))
    return "\n\n".join(out)


def gemv_rows_split(cfg: GemvConfig, m: int, glu: bool, acc: int, tn: Any = None, n: int = 0) -> tuple[GemvConfig, int]:
    """The split of an m-row GEMV from the one-row split ``cfg`` (:func:`gemv_config`) and the x rows per
    group: the same lanes, pieces and steps (so each row's sums are those of the row alone), R reduced so
    that R x XR accumulators stay within ``acc``; GLU keeps R >= 2 (a gate and an up row). On integer dots
    (weights decoded once per group for its x rows) ``Tuning.gemv_xr`` x rows and ``gemv_wr`` weight rows
    per group (``gemv_wr_u2`` for two-piece steps past gemv_xr rows: their doubled weight registers, but
    on weights of ``gemv_wide_rows`` rows or more, n: the LM head, whose weights do not stay in the cache);
    float dots keep the one-row R within 8 sums. x is quantized once for all rows by the quantize
    dispatch (the per-workgroup staging holds one row), and no persistent launch."""
    if m == 1:
        return cfg, 1
    rmin = 2 if glu else 1
    if cfg.q8x:     # weights decoded once for the group's x rows (gemv_wrows_code): tuning.py's split
        t = tn or tuning(GPU)
        xr = min(m, t.gemv_xr)
        u2_rows = cfg.u2 and m > t.gemv_xr and n < t.gemv_wide_rows
        r = max(rmin, min(t.gemv_wr_u2 if u2_rows else t.gemv_wr, acc // xr))
        return replace(cfg, r=r, xs=False, xq=True, persist=0), xr
    xr = max(1, min(m, 8 // rmin))
    r = max(rmin, min(cfg.r, 8 // xr))
    return replace(cfg, r=r, xs=False, xq=False, persist=0), xr


def gemv_rows(dev: Device, m: int, attrs: dict[str, Any] | None = None, qtype: str = "", n: int = 0, k: int = 0,
              glu: bool = False) -> bool:
    """Whether an m-row matmul runs as a GEMV (``Tuning.gemv_rows``); a ``gemm`` attr (tests,
    benchmarks: GEMM tile overrides) keeps several rows on the GEMM; with the weight's type and shape
    (n rows, gate and up for the GLU), so do those that ``ops/gemm.py`` ``over_gemv`` sends to the matrix
    units, but in plans of one sequence (attr ``one_seq``: a speculative verification), whose rows must sum
    as one-row steps do."""
    if m == 1:
        return True
    if m > tuning(dev).gemv_rows or "gemm" in (attrs or {}):
        return False
    return bool((attrs or {}).get("one_seq")) or not qtype or over_gemv(dev, m, qtype, n, k, glu) is None


def split_rows(n_rows: int, row_bytes: int, limit: int, align: int) -> list[tuple[int, int]]:
    """(first row, row count) ranges whose bytes fit one binding and start at aligned offsets."""
    step = align // math.gcd(row_bytes, align)            # rows per aligned offset
    per = ((limit - 16 - SPAN_PAD) // row_bytes) // step * step   # the span's reach past the rows (_word_span)
    if per <= 0:
        raise DeviceError(f"{step} weight rows of {row_bytes} B (the fewest that keep binding offsets "
                          f"{align}-aligned) exceed the storage-binding limit {limit} B")
    return [(r, min(per, n_rows - r)) for r in range(0, n_rows, per)]


def _grid64(n: int) -> tuple[int, int, int]:
    """quantize_x's grid for n invocations of 64-lane workgroups (it linearizes gid.x + gid.y * 64 nwg.x)."""
    return workgroups_for(-(-n // 64))


def word_span(buf: Any, off: int, nbytes: int) -> tuple[Any, int, int]:
    """(buffer, offset, size) of nbytes at off, reaching SPAN_PAD further (a paired type's last d: layout.py)
    and rounded up to 16 bytes where the buffer allows (buffers are: Device.create_buffer), so that loaders
    reading the weights as 16-byte words (W4) reach the word holding the last bytes."""
    return (buf, off, min((nbytes + SPAN_PAD + 15) // 16 * 16, buf.size - off))


def _span(b: Binding) -> tuple[Any, int]:
    return (b[0], b[1]) if isinstance(b, tuple) else (b, 0)


class Gemv:
    """The matmul of one or a few rows (``shaders/gemv_q.wgsl``) over one weight type, or two (``mixed``).

    One type: n rows, bound as several row ranges (one dispatch each) when over the binding limit.
    Two types (``types`` = (t0, t1), ``rows`` = (n0, n1)): one dispatch whose first workgroups compute
    the n0 rows of t0 (slot 0) and the rest the n1 rows of t1 (slot 1), output columns 0.. and n0..;
    each slot's weights (and biases) are one contiguous binding. A type without a specialized piece file
    (dq8) can only be slot 0: :meth:`mixable` says whether a pair fits.
    ``m`` > 1 rows of x (decode batches): :func:`gemv_rows_split`; the ``gemv`` attr's ``xr`` overrides
    the x rows per group.
    ``expert`` = (n_expert, ksel, xslot): matmul_id's decode (gemv_q.wgsl EXPERT): the m output rows are
    (token, slot) pairs, each with its own expert's ``rows`` rows (the weight holds n_expert of them) and
    the one-row split (no weight row is shared by two pairs); :meth:`encode` takes the ids. With ``act``
    (matmul_id_glu) ``rows`` is gate + up rows and the weight all experts' gate rows, then their up rows.
    ``sumk`` (with ``expert``, ``has_res``; matmul_id_sum_add): a workgroup computes one token's ksel pairs
    over the same columns and stores their sum weighted by the bias binding (the router's weights) plus
    the residual: y is [tokens, rows] (gemv_q.wgsl SUMK). One binding must hold every expert.
    """

    def __init__(self, dev: Device, attrs: dict[str, Any], k: int, types: Sequence[str], rows: Sequence[int],
                 has_bias: bool, has_res: bool = False, nseg: int = 1, act: str | None = None,
                 norm_eps: float | None = None, m: int = 1, expert: tuple[int, int, int] | None = None,
                 sumk: bool = False):
        self.dev, self.k, self.m, self.expert, self.sumk = dev, k, m, expert, sumk
        self.qts = [get_type(t) for t in types]
        self.rows = list(rows)
        self.mixed = len(types) == 2
        n = sum(self.rows)
        self.row_bytes = [qt.row_bytes(k) for qt in self.qts]
        self.has_bias, self.act = has_bias, act
        self.n_out = n // 2 if act else n
        cls = device_class(dev)
        # the experts' GEMV: split as a weight of all its pairs' rows (its workgroups are the pairs' rows)
        cfg = gemv_config(self.qts[0].name, k, n * (m if expert else 1), dev.int8_dots, cls)
        over = dict(attrs.get("gemv", {}))      # tests and benchmarks: override fields of the choice
        piece1 = over.pop("piece1", None)
        xr_over = over.pop("xr", None)
        tsum = over.pop("tsum", None)
        if expert:      # one x row per group (pairs share no weight rows); a workgroup stages its pair's x
            if self.mixed or has_bias or has_res != sumk or nseg > 1 or norm_eps is not None or (sumk and act):
                raise DeviceError("matmul_id: the experts' GEMV has one weight type and no epilogue but GLU "
                                  "or the weighted sum")
            cfg, self.xr = replace(cfg, persist=0), 1
            if sumk:    # a group per pair of the token, each on the same columns; x quantized by a dispatch
                ksel = expert[1]
                if m % ksel or ksel > 64:
                    raise DeviceError(f"matmul_id_sum_add: {ksel} experts a token over {m} pairs")
                cfg = replace(cfg, gpw=ksel, tpr=min(cfg.tpr, 1 << (256 // ksel).bit_length() - 1), xs=False,
                              xq=cfg.q8x)
        else:
            cfg, self.xr = gemv_rows_split(cfg, m, bool(act), tuning(cls).gemv_acc, tuning(cls), n)
        cfg = replace(cfg, **over)
        if xr_over:
            self.xr = int(xr_over)
        if act:                                 # a group pairs R/2 gate rows with R/2 up rows
            cfg = replace(cfg, r=max(2, cfg.r))
        pieces = [cfg.piece or "dq8"]
        if self.mixed:
            pieces.append(piece1 or gemv_config(self.qts[1].name, k, self.rows[1], dev.int8_dots, cls).piece)
        for p, qt in zip(pieces, self.qts):
            if PIECE_TYPES.get(p, qt.name) != qt.name or (p == "q32" and qt.name not in Q8_TYPES):
                raise DeviceError(f"matmul: GEMV piece {p!r} does not read {qt.name}")
        if cfg.q8x and "q8x" not in over and any(p not in Q8X_PIECES for p in pieces):
            cfg = replace(cfg, q8x=False)       # a slot's piece (or an overridden one) has float dots only
        if cfg.xq and not cfg.q8x and "xq" not in over:
            cfg = replace(cfg, xq=False)
        # x staged per workgroup: the larger slot's row
        xs_words = max(xq_words(p, cfg.ppb32, k) for p in pieces) \
            if cfg.xs and cfg.q8x and all(p in Q8X_PIECES for p in pieces) else 1
        nv = (cfg.r + (norm_eps is not None)) * self.xr      # values a group reduces (gemv/reduce_*.wgsl)
        table = 1024 if any(p in TABLE_PIECES for p in pieces) else 0     # gemv/table_true.wgsl's words
        if 4 * xs_words > int(dev.limits["max-compute-workgroup-storage-size"]) - 4 * cfg.tpr * cfg.gpw * (nv + 1) \
                - 64 - table:
            cfg, xs_words = replace(cfg, xs=False, xq="xs" not in over), 1    # too big: quantize by dispatch
        if cfg.r not in (1, 2, 4, 8) or cfg.tpr & (cfg.tpr - 1) or cfg.tpr * cfg.gpw > 256 \
                or (self.mixed and (pieces[1] in ("dq8", "q32") or act or has_res)) \
                or (cfg.q8x and any(p not in Q8X_PIECES for p in pieces)) or ((cfg.xq or cfg.xs) and not cfg.q8x) \
                or (cfg.xq and cfg.xs) or cfg.persist < 0 or (cfg.persist and self.mixed) \
                or (sumk and (cfg.gpw != expert[1] or cfg.xs or cfg.persist)) \
                or (m > 1 and ((cfg.xs and not expert) or cfg.persist)) or not 1 <= self.xr <= 8 \
                or cfg.r * self.xr > 16 \
                or (act and cfg.r < 2):
            raise DeviceError(f"matmul: unsupported GEMV split {cfg} for {m} rows, {self.xr} per group "
                              f"(pieces {pieces})")
        self.cfg, self.pieces = cfg, pieces
        if tsum is None:
            tsum = m >= tuning(cls).gemv_tsum_rows
        tsum_code = gemv_tsum_code(cfg.r * self.xr) if tsum and dev.has_subgroups else ""   # "": no such form
        defines = {"QUANT": self.qts[0].name.lower(), "PIECE0": pieces[0], "PIECE1": pieces[-1],
                   "MIXED": self.mixed, "BIAS": has_bias, "HAS_BIAS": False, "HAS_RES": has_res, "NSEG": nseg,
                   "GLU": bool(act), "ACT": act or "silu", "HAS_NORM": norm_eps is not None,
                   "EPS": f32_lit(norm_eps or 0.0), "TPR": cfg.tpr, "R": cfg.r, "GPW": cfg.gpw,
                   "PPB32": cfg.ppb32, "MAGIC": cfg.magic, "U2": cfg.u2, "Q8X": cfg.q8x, "XQIN": cfg.xq,
                   "XSTAGE": cfg.xs, "XSWORDS": xs_words, "XCLAMP": cfg.xclamp, "PERSIST": cfg.persist > 0,
                   "REDUCE": "sg" if dev.has_subgroups else "wg", "MULTI": m > 1, "XR": self.xr,
                   "NXB": m // expert[1] if sumk else -(-m // self.xr), "EXPERT": bool(expert), "SUMK": sumk,
                   "TABLE": table > 0, "TSUM": bool(tsum_code), "TSUM_CODE": tsum_code,
                   **gemv_rows_code(cfg.r, self.xr, m > 1)}
        # several x rows on integer dots: each weight piece decoded once for all of them (gemv_wrows_code)
        wrows = m > 1 and cfg.q8x and all(p in Q8X_PIECES for p in pieces)
        defines |= {"WROWS": gemv_wrows_code(pieces, cfg.r, self.xr, cfg.u2) if wrows else "",
                    "DOT0": "rows_dot_w0" if wrows else "rows_dot",
                    "DOT1": ("rows_dot_w1" if self.mixed else "rows_dot_w0") if wrows else "rows_dot"}
        self.nxb = defines["NXB"]
        self.pipe = dev.pipeline("gemv_q.wgsl", defines=defines)
        x_rows = m // expert[1] if expert and not expert[2] else m
        if cfg.xq:      # x quantized once per piece by a dispatch (one invocation per piece), then read
            self.xq_pieces = x_rows * sum(k // piece_elems(p, cfg.ppb32) for p in pieces)
            self.xq_pipe = dev.pipeline("gemv_q.wgsl", "quantize_x", defines)
            self.xq_buf = dev.create_buffer(4 * x_rows * sum(xq_words(p, cfg.ppb32, k) for p in pieces),
                                            label="gemv int8 x")
        if expert and act:      # all gate weights, then all up weights: one binding
            if expert[0] * n * self.row_bytes[0] > dev.max_storage_binding:
                raise DeviceError(f"matmul_id_glu: {expert[0] * n * self.row_bytes[0]} B of weights exceed one "
                                  "storage binding")
            self.ranges = [(0, expert[0] * n)]
        elif expert:      # whole experts per binding: ranges of experts, one dispatch each
            per = split_rows(expert[0], n * self.row_bytes[0], dev.max_storage_binding, dev.storage_align)
            self.ranges = [(e0 * n, ne * n) for e0, ne in per]
            if sumk and len(per) > 1:
                raise DeviceError(f"matmul_id_sum_add: {expert[0] * n * self.row_bytes[0]} B of experts exceed "
                                  "one storage binding")
        elif self.mixed:
            self.ranges = [(0, n)]
        else:
            self.ranges = split_rows(n, self.row_bytes[0], dev.max_storage_binding, dev.storage_align)
            if act and len(self.ranges) > 1:
                raise DeviceError(f"matmul: GLU weights of {n * self.row_bytes[0]} B exceed one storage binding")

    @staticmethod
    def mixable(dev: Device, types: Sequence[str], nbytes: Sequence[int]) -> list[int] | None:
        """The slot order (indices into ``types``) for one mixed dispatch over two types, or None."""
        grid = any(has_grid(t) for t in types)     # one more storage binding
        if len(types) != 2 or int(dev.limits["max-storage-buffers-per-shader-stage"]) < MIXED_STORAGE + grid \
                or max(nbytes) > dev.max_storage_binding:
            return None
        # a table type's piece (IQ4_XS) stays alone: the kernel binds one lookup table, for slot 0
        special = [get_type(t).name in GEMV_PIECES and not has_grid(t) for t in types]
        if not any(special):
            return None
        return [0, 1] if special[1] else [1, 0]

    def encode(self, x: Binding, ws: Sequence[Binding], bs: Sequence[Binding | None], y: Binding,
               res: Binding | None = None, seg_end: Sequence[int] = (), seg_y: Sequence[int] = (),
               nw: Binding | None = None, ids: Binding | None = None) -> list[Dispatch]:
        """Dispatches writing y (one weight binding per slot, and its bias or None); ``seg_end``/``seg_y``:
        segment end columns and element offsets in y; ``nw``: the norm weights (``norm_eps``); ``ids``:
        the experts' GEMV's expert per pair."""
        seg_end = list(seg_end) or [self.n_out]
        seg_y = list(seg_y) or [0]
        pad = [0] * (4 - len(seg_end))
        ro = self.cfg.r // 2 if self.act else self.cfg.r
        per_wg = ro if self.sumk else ro * self.cfg.gpw     # sumk: the groups share their columns
        out = []
        for row0, rows in self.ranges:
            wbuf, wbase = _span(ws[0])
            w = word_span(wbuf, wbase + row0 * self.row_bytes[0], rows * self.row_bytes[0])
            ex: dict[int, Binding] = {}
            if self.expert:     # groups of one expert's rows; the range's experts row0 / n .. (GLU: all)
                n_e, ksel, xslot = self.expert
                n = self.n_out
                e0, e1 = (0, n_e) if self.act else (row0 // n, (row0 + rows) // n)
                ex = {16: self.dev.uniform([e0, e1, ksel, xslot, n_e, 0, 0, 0])}
                row0, rows = 0, ((n_e + 1) * n if self.act else n)    # rows: the clamp's bound only
                n_wg = -(-n // per_wg)
            else:
                n_wg = -(-(rows // 2 if self.act else rows) // per_wg)
            dims = self.dev.uniform([self.k, self.n_out, rows, row0, self.row_bytes[0], self.m, 0, n_wg,
                                     *seg_end, *pad, *seg_y, *pad])
            xin = x
            if self.cfg.xq:
                if not out:
                    qbg = self.dev.bind_group(self.xq_pipe, {1: dims, 2: x, 8: nw or x, 13: self.xq_buf, **ex})
                    out.append(Dispatch(self.xq_pipe, qbg, _grid64(self.xq_pieces)))
                xin = self.xq_buf
            binds = {1: dims, 2: xin, 3: w, 4: bs[0] or x, 5: y, 6: w, 7: res or x, 8: nw or x,
                     **grid_binds(self.dev, self.qts[0].name)}
            if self.expert:
                binds |= {**ex, 0: self.dev.params_buffer, 15: ids}
            if self.cfg.persist:
                n_wg = min(n_wg, self.cfg.persist)
            if self.mixed:
                wg0 = -(-self.rows[0] // per_wg)
                w1buf, w1base = _span(ws[1])
                w1 = word_span(w1buf, w1base, self.rows[1] * self.row_bytes[1])
                binds |= {9: w1, 10: w1, 11: bs[1] or x,
                          12: self.dev.uniform([self.rows[0], wg0, self.row_bytes[1], 0])}
                n_wg = wg0 + -(-self.rows[1] // per_wg)
            bg = self.dev.bind_group(self.pipe, binds)
            out.append(Dispatch(self.pipe, bg, workgroups_for(n_wg * self.nxb)))
        return out


class Gemm:
    """One GEMV/GEMM pipeline over a weight of ``n`` rows of one type, and its dispatches.

    Shared by ``matmul``, ``matmul_add`` (``res``: the residual added in the epilogue), ``matmul_multi``
    (``nseg`` > 1: several weights stored back to back, each writing its own output) and ``matmul_glu``
    (``act``: the n rows are n/2 gate rows then n/2 up rows, one output of n/2 columns; GEMV, or the
    matrix-unit GEMM where ``ops/gemm.py`` ``glu_gemm``).
    ``norm_eps``: x is RMS-normalized first (the ``nw`` weights, this eps): on the fly in the GEMV, in
    the matrix-unit GEMM's x pass, else by the ``rms_norm`` kernel into a device-wide scratch.
    Up to ``Tuning.gemv_rows`` rows run :class:`Gemv`; more the GEMM of ``ops/gemm.py``.
    """

    def __init__(self, dev: Device, attrs: dict[str, Any], m: int, k: int, n: int, qtype: str,
                 has_bias: bool, has_res: bool = False, nseg: int = 1, act: str | None = None,
                 norm_eps: float | None = None):
        self.dev, self.m, self.k, self.n = dev, m, k, n
        self.qt = get_type(qtype)
        if self.qt.name not in TYPES:
            raise DeviceError(f"matmul: no WGSL dequant snippet for weight type {self.qt.name}")
        if self.k % 8:
            raise DeviceError(f"matmul: inner dimension {self.k} is not a multiple of 8")
        if not 1 <= nseg <= 4 or (has_res and nseg > 1) or (act and (has_res or has_bias)):
            raise DeviceError(f"matmul: {nseg} output segments (residual: {has_res}, GLU {act}, {m} rows) "
                              "unsupported")
        self.row_bytes = self.qt.row_bytes(self.k)
        self.n_out = n // 2 if act else n
        self.gemv = None
        if gemv_rows(dev, m, attrs, self.qt.name, n, k, bool(act)):
            self.gemv = Gemv(dev, attrs, k, [qtype], [n], has_bias, has_res, nseg, act, norm_eps, m)
            return
        self.ranges = split_rows(self.n, self.row_bytes, dev.max_storage_binding, dev.storage_align)
        defines = {"QUANT": self.qt.name.lower(), "HAS_BIAS": has_bias, "HAS_RES": has_res, "NSEG": nseg,
                   "GLU": bool(act), "ACT": act or "silu", "HAS_NORM": False, "EPS": f32_lit(0.0)}
        # ops/gemm.py picks the kernel and encodes it; attrs["gemm"] (tests, benchmarks): tile overrides
        self.gemm = GemmKernel(dev, m, self.k, self.n, self.qt.name, defines, attrs.get("gemm"), norm_eps)
        self.norm = (RmsNorm(dev, {"eps": norm_eps, "group": k}, [(m, k), (k,)], ["f32", "f32"], [(m, k)])
                     if norm_eps is not None and not self.gemm.norm_xpass else None)

    def encode(self, x: Binding, w: Binding, bias: Binding | None, y: Binding, res: Binding | None = None,
               seg_end: Sequence[int] = (), seg_y: Sequence[int] = (), nw: Binding | None = None) -> list[Dispatch]:
        """Dispatches writing y; ``seg_end``/``seg_y``: segment end columns and element offsets in y;
        ``nw``: the norm weights (``norm_eps``)."""
        if self.gemv is not None:
            return self.gemv.encode(x, [w], [bias], y, res, seg_end, seg_y, nw)
        seg_end = list(seg_end) or [self.n_out]
        seg_y = list(seg_y) or [0]
        pad = [0] * (4 - len(seg_end))
        wbuf, wbase = _span(w)
        out: list[Dispatch] = []
        xq: dict[int, Binding] = {}
        if self.norm is not None:    # x RMS-normed into a device-wide scratch (dispatches run in order)
            xn = scratch_buffer(self.dev, 4 * self.m * self.k, "normed x")
            out += self.norm.encode([x, nw, xn])
            x = xn
        for i, (row0, rows) in enumerate(self.ranges):
            ws = word_span(wbuf, wbase + row0 * self.row_bytes, rows * self.row_bytes)
            dims = self.dev.uniform([self.k, self.n_out, rows, row0, self.row_bytes, self.m, 0, 0,
                                     *seg_end, *pad, *seg_y, *pad])
            if i == 0:      # the integer-dot GEMM's int8 x, once for all row ranges
                pre, xq = self.gemm.x_pass(dims, x, nw)
                out += pre
            binds = {1: dims, 2: x, 3: ws, 4: bias or x, 5: y, 7: res or x, **xq}
            out += self.gemm.encode(binds, rows)
        return out


def computed_case(dev: Device, case: Case, attrs: dict[str, Any] | None = None) -> Case:
    """A matmul-family ``case`` as the kernels chosen for it on ``dev`` (with ``attrs``, default the case's)
    compute it: its f16-product twin (:func:`mma_gemm_case`) where every weight's GEMM is the matrix-unit
    one, else the case itself (the GEMVs and the other GEMMs hold the f32 bound)."""
    attrs = case.attrs if attrs is None else attrs
    m, k = case.inputs[0].shape
    n_w, glu = _n_weights(case), case.op == "matmul_glu"
    ws = list(zip(case.inputs[1:1 + n_w], case.in_types[1:1 + n_w]))
    if all(gemv_rows(dev, m, attrs, t, (1 + glu) * w.shape[0], k, glu) for w, t in ws):
        return case
    cfgs = [gemm_shader(dev, m, t, w.shape[0], attrs.get("gemm"), k)[2] for w, t in ws]
    if not all(c is not None and c.mma for c in cfgs):
        return case
    return mma_gemm_case(case, [t for c, t in zip(cfgs, case.in_types[1:]) if c.half])


class _MatmulFamily(OpKernel):
    def as_computed(self, case: Case) -> Case:
        return computed_case(self.dev, case, self.attrs)


@register
class MatmulKernel(_MatmulFamily):
    """Inputs x[R, k] f32, W[n, k] (any of :data:`TYPES`), optional bias[n] f32; output y[R, n]."""

    op = "matmul"

    def __init__(self, dev: Device, attrs: dict[str, Any], in_shapes: Sequence[Shape],
                 in_types: Sequence[str], out_shapes: Sequence[Shape]):
        super().__init__(dev, attrs, in_shapes, in_types, out_shapes)
        (m, k), (n, _) = self.in_shapes[0], self.in_shapes[1]
        self.has_bias = len(in_shapes) > 2
        self.gemm = Gemm(dev, attrs, m, k, n, in_types[1], self.has_bias)

    @classmethod
    def output_shapes(cls, in_shapes: Sequence[Shape], attrs: dict[str, Any]) -> list[Shape]:
        return [(in_shapes[0][0], in_shapes[1][0])]

    def encode(self, buffers: Sequence[Binding]) -> list[Dispatch]:
        return self.gemm.encode(buffers[0], buffers[1], buffers[2] if self.has_bias else None, buffers[-1])


@register
class MatmulAddKernel(_MatmulFamily):
    """``matmul_add``: inputs x[R, k], W[n, k], res[R, n], optional bias[n]; y = x @ W.T (+ bias) + res."""

    op = "matmul_add"

    def __init__(self, dev: Device, attrs: dict[str, Any], in_shapes: Sequence[Shape],
                 in_types: Sequence[str], out_shapes: Sequence[Shape]):
        super().__init__(dev, attrs, in_shapes, in_types, out_shapes)
        (m, k), (n, _) = self.in_shapes[0], self.in_shapes[1]
        self.has_bias = len(in_shapes) > 3
        self.gemm = Gemm(dev, attrs, m, k, n, in_types[1], self.has_bias, has_res=True)

    @classmethod
    def output_shapes(cls, in_shapes: Sequence[Shape], attrs: dict[str, Any]) -> list[Shape]:
        return [tuple(in_shapes[2])]

    def encode(self, buffers: Sequence[Binding]) -> list[Dispatch]:
        return self.gemm.encode(buffers[0], buffers[1], buffers[3] if self.has_bias else None, buffers[-1],
                                res=buffers[2])


@register
class MatmulMultiKernel(_MatmulFamily):
    """``matmul_multi``: x[R, k] times weights W_i[n_i, k] (+ bias_i), one output y_i[R, n_i] each; with
    attr ``norm_eps`` a last input, norm weights w[k], RMS-normalizes x first (GEMV prologue).

    Weights of one type that the backend stored back to back in one buffer (with their biases likewise
    and their outputs in one arena) run as one GEMV/GEMM over the concatenated rows, each output column
    stored to its own output: one dispatch per distinct weight type. Anything else (e.g. separately
    uploaded test inputs) falls back to one dispatch per weight.
    """

    op = "matmul_multi"

    def __init__(self, dev: Device, attrs: dict[str, Any], in_shapes: Sequence[Shape],
                 in_types: Sequence[str], out_shapes: Sequence[Shape]):
        super().__init__(dev, attrs, in_shapes, in_types, out_shapes)
        self.n_w = int(attrs["n_w"])
        self.norm_eps = attrs.get("norm_eps")
        self.has_bias = len(in_shapes) - (self.norm_eps is not None) == 1 + 2 * self.n_w
        self.m, self.k = self.in_shapes[0]
        self.types = list(in_types[1:1 + self.n_w])
        self.rows = [self.in_shapes[1 + i][0] for i in range(self.n_w)]

    @classmethod
    def output_shapes(cls, in_shapes: Sequence[Shape], attrs: dict[str, Any]) -> list[Shape]:
        return [(in_shapes[0][0], in_shapes[1 + i][0]) for i in range(int(attrs["n_w"]))]

    def _gemm(self, qtype: str, n: int, nseg: int) -> Gemm:
        return Gemm(self.dev, self.attrs, self.m, self.k, n, qtype, self.has_bias, nseg=nseg,
                    norm_eps=self.norm_eps)

    def encode(self, buffers: Sequence[Binding]) -> list[Dispatch]:
        x, ws = buffers[0], buffers[1:1 + self.n_w]
        bs = buffers[1 + self.n_w:1 + 2 * self.n_w] if self.has_bias else [None] * self.n_w
        ys = buffers[len(buffers) - self.n_w:]
        nw = buffers[len(self.in_shapes) - 1] if self.norm_eps is not None else None
        groups = [[i for i, ti in enumerate(self.types) if ti == t] for t in dict.fromkeys(self.types)]
        joined = [self._joined(g, ws, bs) for g in groups]
        if gemv_rows(self.dev, self.m, self.attrs) and len(groups) == 2 and all(joined) and _one_buffer(list(ys)) \
                and self.n_w <= 4:
            order = Gemv.mixable(self.dev, [self.types[g[0]] for g in groups],
                                 [sum(self.rows[i] for i in g) * get_type(self.types[g[0]]).row_bytes(self.k)
                                  for g in groups])
            if order is not None:
                return self._mixed([groups[o] for o in order], x, ws, bs, ys, nw)
        out: list[Dispatch] = []
        for idx in groups:
            for part in (idx[j:j + 4] for j in range(0, len(idx), 4)):
                if not self._joined(part, ws, bs) or len(part) == 1 or not _one_buffer([ys[i] for i in part]):
                    for i in part:
                        out += self._gemm(self.types[i], self.rows[i], 1).encode(x, ws[i], bs[i], ys[i], nw=nw)
                    continue
                t = self.types[part[0]]
                row_bytes = get_type(t).row_bytes(self.k)
                y0, seg_y = _segments(part, ys)
                ends = np.cumsum([self.rows[i] for i in part]).tolist()
                w0, b0 = ws[part[0]], bs[part[0]]
                span = (w0[0], w0[1], ends[-1] * row_bytes)
                bias = None if b0 is None else (b0[0], b0[1], 4 * ends[-1])
                out += self._gemm(t, ends[-1], len(part)).encode(x, span, bias, y0, seg_end=ends, seg_y=seg_y, nw=nw)
        return out

    def _joined(self, part: list[int], ws: Sequence[Binding], bs: Sequence[Binding | None]) -> bool:
        """Whether the weights ``part`` (one type) lie back to back in one buffer, their biases likewise."""
        if len(part) == 1:
            return True
        row_bytes = get_type(self.types[part[0]]).row_bytes(self.k)
        return (_contiguous([ws[i] for i in part], [self.rows[i] * row_bytes for i in part])
                and (not self.has_bias or _contiguous([bs[i] for i in part], [4 * self.rows[i] for i in part])))

    def _mixed(self, slots: list[list[int]], x: Binding, ws: Sequence[Binding], bs: Sequence[Binding | None],
               ys: Sequence[Binding], nw: Binding | None) -> list[Dispatch]:
        """One GEMV over two weight types: slot s runs the joined weights ``slots[s]``."""
        order = slots[0] + slots[1]
        n_s = [sum(self.rows[i] for i in g) for g in slots]
        types = [self.types[g[0]] for g in slots]
        gemv = Gemv(self.dev, self.attrs, self.k, types, n_s, self.has_bias, nseg=len(order), norm_eps=self.norm_eps,
                    m=self.m)
        wspan, bspan = [], []
        for g, n, qt in zip(slots, n_s, gemv.qts):
            buf, off = _span(ws[g[0]])
            wspan.append(word_span(buf, off, n * qt.row_bytes(self.k)))
            b = bs[g[0]]
            bspan.append(None if b is None else (*_span(b), 4 * n))
        y0, seg_y = _segments(order, ys)
        ends = np.cumsum([self.rows[i] for i in order]).tolist()
        return gemv.encode(x, wspan, bspan, y0, seg_end=ends, seg_y=seg_y, nw=nw)


def _segments(part: Sequence[int], ys: Sequence[Binding]) -> tuple[Binding, list[int]]:
    """The one binding spanning the outputs ``part`` (in one buffer) and each one's element offset in it."""
    buf, start = _span(ys[part[0]])
    if not isinstance(ys[part[0]], tuple):
        return ys[part[0]], [0]
    y0 = min(ys[i][1] for i in part)
    y_end = max(ys[i][1] + ys[i][2] for i in part)
    return (buf, y0, y_end - y0), [(ys[i][1] - y0) // 4 for i in part]


@register
class MatmulGluKernel(_MatmulFamily):
    """``matmul_glu``: x[m, k], W_gate[n, k], W_up[n, k] -> act(x Wg) * (x Wu), [m, n]; with attr
    ``norm_eps`` a last input, norm weights w[k], RMS-normalizes x first (:class:`Gemm`).

    Gate and up stored back to back in one buffer (as WgpuBackend joins them) run as one GEMV, or one
    matrix-unit GEMM (``ops/gemm.py`` ``glu_gemm``), with the activation in its epilogue; otherwise two
    GEMVs / GEMMs into scratch buffers and the ``glu`` kernel.
    """

    op = "matmul_glu"

    def __init__(self, dev: Device, attrs: dict[str, Any], in_shapes: Sequence[Shape],
                 in_types: Sequence[str], out_shapes: Sequence[Shape]):
        super().__init__(dev, attrs, in_shapes, in_types, out_shapes)
        (self.m, self.k), (self.n, _) = self.in_shapes[0], self.in_shapes[1]
        if in_types[1] != in_types[2]:
            raise DeviceError(f"matmul_glu: one weight type, got {in_types[1:3]}")
        self.qtype = in_types[1]

    @classmethod
    def output_shapes(cls, in_shapes: Sequence[Shape], attrs: dict[str, Any]) -> list[Shape]:
        return [(in_shapes[0][0], in_shapes[1][0])]

    def encode(self, buffers: Sequence[Binding]) -> list[Dispatch]:
        x, wg, wu, y = buffers[0], buffers[1], buffers[2], buffers[-1]
        eps = self.attrs.get("norm_eps")
        nw = buffers[3] if eps is not None else None
        nbytes = self.n * get_type(self.qtype).row_bytes(self.k)
        m, n, act = self.m, self.n, self.attrs["act"]
        joined = _contiguous([wg, wu], [nbytes])
        one = gemv_rows(self.dev, m, self.attrs, self.qtype, 2 * n, self.k, True) or \
            glu_gemm(self.dev, m, self.qtype, 2 * n, self.k, self.attrs.get("gemm"))
        if joined and 2 * nbytes <= self.dev.max_storage_binding and one:
            gemm = Gemm(self.dev, self.attrs, m, self.k, 2 * n, self.qtype, False, act=act, norm_eps=eps)
            return gemm.encode(x, (wg[0], wg[1], 2 * nbytes), None, y, nw=nw)
        # gate and up into one device-wide scratch (dispatches run in order), up at a binding-aligned element
        al = self.dev.storage_align // 4
        up0 = -(-m * n // al) * al
        buf = scratch_buffer(self.dev, 4 * (up0 + m * n), "glu")
        halves = [(buf, 0, 4 * m * n), (buf, 4 * up0, 4 * m * n)]
        if joined:    # as matmul_multi runs them: one GEMM over both, two output segments
            gemm = Gemm(self.dev, self.attrs, m, self.k, 2 * n, self.qtype, False, nseg=2, norm_eps=eps)
            out = gemm.encode(x, (wg[0], wg[1], 2 * nbytes), None, (buf, 0, 4 * (up0 + m * n)),
                              seg_end=[n, 2 * n], seg_y=[0, up0], nw=nw)
        else:
            gemm = Gemm(self.dev, self.attrs, m, self.k, n, self.qtype, False, norm_eps=eps)
            out = gemm.encode(x, wg, None, halves[0], nw=nw) + gemm.encode(x, wu, None, halves[1], nw=nw)
        glu = Glu(self.dev, {"act": act}, [(m, n)] * 2, ["f32"] * 2, [(m, n)])
        return out + glu.encode([*halves, y])


def _contiguous(bindings: Sequence[Binding], sizes: Sequence[int]) -> bool:
    """Whether the ranges lie back to back, in order, in one buffer."""
    if not _one_buffer(bindings):
        return False
    return all(b[1] + n == c[1] for b, c, n in zip(bindings, bindings[1:], sizes))


def _one_buffer(bindings: Sequence[Binding]) -> bool:
    return all(isinstance(b, tuple) and b[0] is bindings[0][0] for b in bindings)


def matmul_case(qtype: str, m: int, k: int, n: int, bias: bool, seed: int = 0, distinct_rows: int = 0) -> Case:
    """A random matmul check: weights quantized from N(0, 1), x ~ N(0, 1), float64 reference.

    ``distinct_rows`` > 0 quantizes only that many rows and tiles them (benchmark sizes stay cheap).
    Decode-shaped cases (m == 1) report GB/s, prefill-shaped ones GFLOP/s.
    """
    rng = np.random.default_rng(seed)
    qt = get_type(qtype)
    raw = sample_weights(qt, distinct_rows or n, k, rng)
    if distinct_rows:
        raw = np.tile(raw, (-(-n // distinct_rows), 1))[:n]
    x = rng.standard_normal((m, k)).astype(np.float32)
    ins = [x, raw] + ([rng.standard_normal(n).astype(np.float32)] if bias else [])

    def reference() -> list[np.ndarray]:
        y = x.astype(np.float64) @ dequantize(raw, qt).astype(np.float64).T
        return [y + ins[2] if bias else y]

    return Case("matmul", f"{qt.name} {m}x{k} @ {n}x{k}{' +bias' if bias else ''}", ins,
                ["f32", qt.name] + (["f32"] if bias else []), reference, tol=matmul_tol(m, k),
                nbytes=raw.nbytes + 4 * (k + n) if m == 1 else 0, flops=2 * m * n * k if m > 1 else 0)



def glu64(g: np.ndarray, u: np.ndarray, act: str) -> np.ndarray:
    """``act(g) * u`` in float64, silu or gelu_tanh: the GLU references (independent of numpy_ops)."""
    if act == "silu":
        return g / (1 + np.exp(-g)) * u
    return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3))) * u


def q8x_case(case: Case, pieces: Sequence[str], ppb32: int = 2, x_round: Callable | None = None,
             w_round: Callable = lambda w: w, norm_first: bool = False, deq: Callable | None = None) -> Case:
    """A GEMV ``case`` (matmul, matmul_add, matmul_multi, matmul_glu; norm prologue or not) with its
    reference recomputed from :func:`q8x_round`'s x, one piece per weight: what the q8x GEMV computes, to
    be run with ``{"gemv": {"q8x": True, ...}}`` at the f32 tolerance. ``x_round(x, piece)`` replaces
    q8x_round (the integer-dot GEMM: ops/gemm.py ``q8_round``); ``w_round`` rounds the dequantized
    weights (the matrix-unit GEMM: to f16); ``norm_first``: x is rounded after the norm (the matrix-unit
    GEMM's x pass), not multiplied by the row's 1 / rms after the products (the GEMV); ``deq(w, type)``
    replaces both dequantization and ``w_round``."""
    x, n_w = case.inputs[0], len(pieces)
    ws = case.inputs[1:1 + n_w] if case.op != "matmul_add" else case.inputs[1:2]
    types = case.in_types[1:1 + len(ws)]
    extra = case.inputs[1 + len(ws):]
    xw, rs = x, 1.0
    if "norm_eps" in case.attrs:
        rs = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + case.attrs["norm_eps"])
        xw, rs = (x * rs * extra[-1], 1.0) if norm_first else (x * extra[-1], rs)
        extra = extra[:-1]

    def reference() -> list[np.ndarray]:
        rnd = x_round or (lambda v, p: q8x_round(v, p, ppb32))
        dq = deq or (lambda w, t: w_round(dequantize(w, get_type(t))))
        ys = [rs * rnd(xw, p) @ dq(w, t).astype(np.float64).T for p, w, t in zip(pieces, ws, types)]
        if case.op == "matmul_glu":
            return [glu64(*ys, case.attrs["act"])]
        if case.op == "matmul_add":
            return [ys[0] + extra[0] + (extra[1] if len(extra) > 1 else 0)]
        return [y + (b if extra else 0) for y, b in zip(ys, extra or [0] * len(ys))]
    return replace(case, name=case.name + " int8 x", reference=reference)


def _n_weights(case: Case) -> int:
    return 2 if case.op == "matmul_glu" else case.attrs.get("n_w", 1)


def q8_gemm_case(case: Case) -> Case:
    """A GEMM ``case`` (matmul, matmul_add, matmul_multi, matmul_glu) as the integer-dot GEMM computes it: x moved off
    rounding ties (ops/gemm.py ``q8_tie_free``), the reference from ``q8_round``'s int8 x per 32; to be run
    with ``{"gemm": {"q8": True, ...}}`` at the f32 tolerance."""
    case = replace(case, inputs=[q8_tie_free(case.inputs[0]), *case.inputs[1:]])
    return q8x_case(case, [""] * _n_weights(case), x_round=lambda x, p: q8_round(x))

def mma_gemm_case(case: Case, half: Sequence[str] = ()) -> Case:
    """A GEMM ``case`` (matmul, matmul_add, matmul_multi, matmul_glu) as the matrix-unit GEMM (``gemm_mma.wgsl``)
    computes it: x and the dequantized weights rounded to f16, their products (exact in f32) summed in
    f32; to be run with ``{"gemm": {"mma": True}}``. Weights of the types in ``half`` as the f16-arithmetic
    loaders stage them (ops/gemm.py ``half_dequant``). Tolerance: the f32 bound plus 1e-4 for weights whose
    f32 dequantization differs from numpy's in the last bit at an f16 rounding tie (one such weight moves
    an output by ~1.5e-5 of max |ref| at these sizes; a wrong scale, element or row moves it by ~1)."""
    f16 = lambda a: np.asarray(a, np.float32).astype(np.float16).astype(np.float64)
    deq = lambda w, t: half_dequant(w, t) if t in half else f16(dequantize(w, get_type(t)))
    twin = q8x_case(case, [""] * _n_weights(case), x_round=lambda x, p: f16(x), deq=deq, norm_first=True)
    return replace(twin, name=case.name + " f16 products" + (" (half loaders)" if half else ""),
                   tol=case.tol + 1e-4)


@check("matmul")
def matmul_checks() -> list[Case]:
    """GEMV of one row and of several (3 and 11 rows: decode batches), and GEMM (17 rows: gemm_q.wgsl, or
    where the matrix units are the 32-row matrix-unit tile, checked against its f16-product twin through
    ``as_computed``) for every weight type, rows not multiples of the tiles."""
    cases = []
    for i, t in enumerate(TYPES):
        blk = max(get_type(t).block_size, 32)
        k = 640 if blk == 32 else 1024
        cases.append(matmul_case(t, 1, k, 67, bias=False, seed=i))
        cases.append(matmul_case(t, 1, k + 2 * blk, 130, bias=True, seed=100 + i))
        cases.append(matmul_case(t, 3, k, 70, bias=True, seed=200 + i))
        cases.append(matmul_case(t, 17, k + blk, 129, bias=False, seed=300 + i))
        if t in ("Q4_K", "Q6_K", "Q8_0", "F16"):
            cases.append(matmul_case(t, 11, k, 67, bias=True, seed=400 + i))
    return cases


@check("matmul_mmv")
def matmul_mmv_checks() -> list[Case]:
    """The decode-batch matrix-unit GEMM (gemm_mmv.wgsl, where the adapter has matrix units), Q4_K and Q6_K:
    16, 12, 10, 9 and 3 rows, output columns past its 128-row workgroups, bias, residual, split-k with an
    uneven last split, rows of an odd block count (Q6_K's GPU pairs across rows); against the f16-product
    twin with the half loaders' rounding (the joined GLU: tests/test_kernel_gemm.py test_mmv_glu)."""
    if not Device.get().has_mma:
        return []
    cases = [replace(mma_gemm_case(matmul_case("Q4_K", m, 1024, n, bias=bias, seed=700 + i), ["Q4_K"]),
                     attrs={"gemm": {"mmv": True, **sp}})
             for i, (m, n, bias, sp) in enumerate([(16, 200, True, {}), (9, 256, False, {"mmv_splits": 3}),
                                                   (3, 130, True, {"mmv_splits": 2})])]
    cases.append(replace(mma_gemm_case(matmul_add_case("Q4_K", 12, 2048, 144, bias=True, seed=710), ["Q4_K"]),
                         attrs={"gemm": {"mmv": True, "mmv_splits": 4}}))
    cases.append(replace(mma_gemm_case(matmul_case("Q6_K", 16, 1280, 200, bias=True, seed=720), ["Q6_K"]),
                         attrs={"gemm": {"mmv": True}}))
    cases.append(replace(mma_gemm_case(matmul_add_case("Q6_K", 10, 1024, 136, bias=False, seed=730), ["Q6_K"]),
                         attrs={"gemm": {"mmv": True, "mmv_splits": 3}}))
    return cases


def matmul_add_case(qtype: str, m: int, k: int, n: int, bias: bool, seed: int = 0) -> Case:
    """``matmul_case`` plus a residual input res[m, n] added in the epilogue."""
    c = matmul_case(qtype, m, k, n, bias, seed)
    res = np.random.default_rng(seed + 1).standard_normal((m, n)).astype(np.float32)
    return Case("matmul_add", c.name + " +res", [*c.inputs[:2], res, *c.inputs[2:]],
                [*c.in_types[:2], "f32", *c.in_types[2:]], lambda: [c.reference()[0] + res], c.tol)


NORM_EPS = 1e-6


def norm_input(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A norm prologue's inputs: x scaled away from unit RMS, weights w; and float64 rms_norm(x) * w."""
    g = np.random.default_rng(seed)
    xs = (x * 3.7).astype(np.float32)
    w = g.uniform(0.5, 1.5, x.shape[1]).astype(np.float32)
    xd = xs.astype(np.float64)
    return xs, w, xd / np.sqrt((xd * xd).mean(axis=1, keepdims=True) + NORM_EPS) * w


def matmul_multi_case(qtypes: Sequence[str], m: int, k: int, ns: Sequence[int], bias: bool, seed: int = 0,
                      norm: bool = False) -> Case:
    """One x times several weights (``matmul_case`` each, same x): one output per weight; ``norm``: the
    RMS-norm prologue."""
    cs = [matmul_case(t, m, k, n, bias, seed + i) for i, (t, n) in enumerate(zip(qtypes, ns))]
    x, xn = cs[0].inputs[0], cs[0].inputs[0].astype(np.float64)
    nw: list[np.ndarray] = []
    if norm:
        x, w, xn = norm_input(x, seed)
        nw = [w]
    ins = [x, *(c.inputs[1] for c in cs), *(c.inputs[2] for c in cs if bias), *nw]
    types = ["f32", *qtypes, *(["f32"] * len(cs) if bias else []), *(["f32"] * len(nw))]

    def reference() -> list[np.ndarray]:
        xd = xn
        return [xd @ dequantize(c.inputs[1], get_type(t)).astype(np.float64).T + (c.inputs[2] if bias else 0)
                for c, t in zip(cs, qtypes)]

    return Case("matmul_multi", f"{'+'.join(qtypes)} {m}x{k} @ {ns}{' +bias' if bias else ''}"
                f"{' +norm' if norm else ''}", ins, types, reference, tol=matmul_tol(m, k),
                attrs={"n_w": len(cs), **({"norm_eps": NORM_EPS} if norm else {})})


@check("matmul_add")
def matmul_add_checks() -> list[Case]:
    """GEMV and GEMM with the residual epilogue, with and without bias, odd row counts."""
    return [matmul_add_case(t, m, 640 if get_type(t).block_size == 32 else 1024, n, bias, seed=i)
            for i, (t, m, n, bias) in enumerate([("Q4_K", 1, 67, False), ("Q8_0", 1, 130, True),
                                                  ("Q5_0", 3, 70, False), ("Q6_K", 17, 129, True)])]


@check("matmul_multi")
def matmul_multi_checks() -> list[Case]:
    """Mixed types (q/k/v as in real files: Q5_0, Q5_0, Q8_0), biases, the norm prologue, GEMV and GEMM."""
    return [matmul_multi_case(("Q5_0", "Q5_0", "Q8_0"), 1, 640, (96, 33, 33), True, seed=1),
            matmul_multi_case(("Q5_0", "Q5_0", "Q8_0"), 1, 896, (96, 33, 33), True, seed=4, norm=True),
            matmul_multi_case(("Q4_K", "Q4_K"), 1, 1024, (130, 130), False, seed=2),
            matmul_multi_case(("Q4_K", "Q6_K"), 5, 1024, (70, 67), False, seed=3)]


def matmul_glu_case(t: str, k: int, n: int, act: str, norm: bool, seed: int = 0, m: int = 1) -> Case:
    """Gate and up matmuls of m rows (``matmul_case`` weights, seeds ``seed`` and ``seed + 10``) with the
    activation epilogue, and (one row) the RMS-norm prologue with ``norm`` (its weights from seed ``seed +
    20``), uploaded separately: against float64 ``act(x Wg) * (x Wu)``."""
    g, u = matmul_case(t, m, k, n, False, seed=seed), matmul_case(t, m, k, n, False, seed=seed + 10)
    x, xn, nw = g.inputs[0], g.inputs[0].astype(np.float64), []
    if norm:
        x, w, xn = norm_input(x, seed + 20)
        nw = [w]

    def reference() -> list[np.ndarray]:
        a, b = (xn @ dequantize(c.inputs[1], get_type(t)).astype(np.float64).T for c in (g, u))
        return [glu64(a, b, act)]
    return Case("matmul_glu", f"{t} glu_{act} {m}x{k} @ 2x{n}x{k}{' +norm' if norm else ''}",
                [x, g.inputs[1], u.inputs[1], *nw], ["f32", t, t, *(["f32"] * len(nw))], reference,
                tol=2e-7 * math.sqrt(k), attrs={"act": act, **({"norm_eps": NORM_EPS} if norm else {})})


@check("matmul_glu")
def matmul_glu_checks() -> list[Case]:
    """Gate and up GEMVs with the activation epilogue, with and without the norm prologue, and a short
    GEMM (gemm_q.wgsl on every adapter: checked against float64 alone), separately uploaded here: the
    fallback path (tests/test_fuse.py and tests/test_kernel_gemm.py run the joined one)."""
    return [matmul_glu_case(t, k, n, act, norm, seed=10 + i, m=m)
            for i, (t, k, n, act, norm, m) in enumerate([("Q4_K", 1024, 130, "silu", False, 1),
                                                         ("Q5_0", 640, 67, "gelu_tanh", False, 1),
                                                         ("Q4_K", 768, 67, "silu", True, 1),
                                                         ("Q8_0", 640, 70, "silu", False, 20)])]


@check("matmul.bench", bench=True)
def matmul_bench() -> list[Case]:
    """Decode GEMVs of 2048 x 8192 and 8192 x 2048 (an FFN's up and down) and a 128-row prefill GEMM."""
    cases = []
    for i, t in enumerate(("F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")):
        for k, n in ((2048, 8192), (8192, 2048)):
            c = matmul_case(t, 1, k, n, bias=False, seed=i, distinct_rows=256)
            piece = GEMV_PIECES[t]
            if piece not in Q8X_PIECES:
                cases.append(c)
                continue
            # float and integer dots (which one the default picks depends on the adapter), each
            # against its own reference
            cases.append(replace(c, attrs={"gemv": {"q8x": False}}))
            cases.append(replace(q8x_case(c, [piece]), attrs={"gemv": {"q8x": True, "piece": piece, "ppb32": 2}}))
    for i, t in enumerate(("F16", "Q8_0", "Q4_K")):
        c = matmul_case(t, 128, 2048, 2048, bias=False, seed=i, distinct_rows=256)
        if t not in Q8_TYPES:
            cases.append(c)
            continue
        # f32 and integer-dot GEMMs (the default depends on the adapter), each against its own reference
        cases.append(replace(c, attrs={"gemm": {"q8": False}}))
        cases.append(replace(q8_gemm_case(c), attrs={"gemm": {"q8": True}}))
    return cases
