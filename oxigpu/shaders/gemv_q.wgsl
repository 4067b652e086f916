// Quantized GEMV for decode: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias), x a few rows, W raw GGUF blocks.
// A workgroup is GPW groups of TPR lanes; a group computes R consecutive output rows for XR rows of x.
// Its lanes take consecutive "pieces" of the row (gemv/<piece>.wgsl: a fixed part of a block, loaded
// with as few and as wide loads as its layout allows), so a warp streams contiguous bytes; each lane
// loads the x values of its piece once per x row and applies them to all R rows. Totals:
// gemv/reduce_{sg,wg}.wgsl. Several x rows (MULTI: a batch of sequences' decode rows): each piece of a
// weight row is read once from memory for the XR rows (their repeated reads hit the cache), and the
// M = D.m rows are XR-row blocks, the block index varying fastest over the workgroups so the blocks of
// one weight row run side by side. A row's sums are accumulated in the order a single row's are (the
// same lanes, pieces and steps; R and XR only decide which accumulators a group holds), so its result
// does not depend on how many rows share the dispatch.
// MIXED (matmul_multi over two weight types, one dispatch): slot 0 holds PIECE0's rows, slot 1
// PIECE1's (gemv/slot1_true.wgsl); a workgroup's slot is a uniform branch on its index, and each slot
// runs the same loop through its own piece (gemv/common.wgsl: the `s` argument).
// GLU (matmul_glu): W holds the gate rows then the up rows (D.n each); a group's first R/2 rows are gate
// rows c0.., its last R/2 the matching up rows, and it stores ACT(x Wg) * (x Wu) for its R/2 columns.
// HAS_NORM: x is RMS-normalized on the fly: the GEMV multiplies x * NW and scales its totals by
// 1 / sqrt(mean(x^2) + EPS). Each group sums x^2 over the x its lanes load anyway (between them they
// load every element once), so no pass over x precedes the loop and the normed row is never written.
// Bias: BIAS here (B for slot 0, B1 for slot 1); the GEMV passes HAS_BIAS false to matmul_io's store.
// Q8X: x is quantized to int8 per piece and the rows are reduced by integer dots (gemv/q8x_true.wgsl);
// XQIN: by a dispatch of the entry quantize_x before the GEMV, once (see xpiece); XSTAGE: by each
// workgroup, once, into workgroup memory (stage_x).
// EXPERT (matmul_id's decode): output row m is a (token, expert) pair with its own weights and x row
// (gemv/expert_true.wgsl). SUMK (matmul_id_sum_add): a workgroup's GPW groups are one token's GPW = KSEL
// pairs over the same R columns, and it stores the pairs' sum weighted by B[pair] (the router's weights),
// plus the residual (HAS_RES): the experts' mix in the GEMV's epilogue, not a dispatch of its own.
// TABLE: a piece looks up a codebook, staged in workgroup memory first (gemv/table_true.wgsl).
// Defines: EXPERT, SUMK, TABLE, QUANT, PIECE0, PIECE1, MIXED, BIAS, HAS_BIAS, HAS_RES, NSEG, TPR, R, GPW, REDUCE, MAGIC, PPB32,
// GLU, ACT, HAS_NORM, EPS, U2, Q8X, XQIN, XSTAGE, XSWORDS, XCLAMP, PERSIST, MULTI, XR, NXB, the
// generated blocks ACC_DECL, STEP, U2_STEP, ACC_LIST of rows_dot and WROWS, DOT0, DOT1 (see ops/matmul.py).
#include "math.wgsl"
#include "common/matmul_io.wgsl"
#include "gemv/common.wgsl"
#include "gemv/expert_{{EXPERT}}.wgsl"
#include "gemv/table_{{TABLE}}.wgsl"
#include "gemv/{{PIECE0}}.wgsl"
#include "gemv/{{PIECE1}}.wgsl"

const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;      // 1, 2, 4 or 8
const GPW: u32 = {{GPW}}u;
const WG: u32 = TPR * GPW;
const GLU: bool = {{GLU}};
const EXPERT: bool = {{EXPERT}};
const SUMK: bool = {{SUMK}};
const RO: u32 = select(R, R / 2u, GLU);   // output columns per group
const BIAS: bool = {{BIAS}};
const U2: bool = {{U2}};     // two pieces per loop step
const MULTI: bool = {{MULTI}};   // x has D.m > 1 rows
const XR: u32 = {{XR}}u;         // x rows per group (1 without MULTI)
const NXB: u32 = {{NXB}}u;       // blocks of XR x rows: ceil(D.m / XR)
const NA: u32 = R * XR;          // accumulators per lane: x row j, weight row r at j * R + r
const NVA: u32 = NA + XR;        // and the x rows' x^2 sums (HAS_NORM)

var<workgroup> tot: array<f32, GPW * NA>;   // GLU: the group's row totals, exchanged between lanes

@group(0) @binding(8) var<storage, read> NW: array<vec4<f32>>;
const HAS_NORM: bool = {{HAS_NORM}};
const EPS: f32 = {{EPS}};

#include "gemv/reduce_{{REDUCE}}.wgsl"

// Piece constants and functions of slot s (a constant at every call).
fn qk(s: u32) -> u32 { return select({{PIECE1}}_QK, {{PIECE0}}_QK, s == 0u); }
fn qb(s: u32) -> u32 { return select({{PIECE1}}_QB, {{PIECE0}}_QB, s == 0u); }
fn ppb(s: u32) -> u32 { return select({{PIECE1}}_PPB, {{PIECE0}}_PPB, s == 0u); }
fn px(s: u32) -> u32 { return select({{PIECE1}}_PX, {{PIECE0}}_PX, s == 0u); }
fn gx(s: u32, i: u32, j: u32) -> u32 {
  if (s == 0u) { return {{PIECE0}}_gx(i, j); }
  return {{PIECE1}}_gx(i, j);
}
fn gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  if (s == 0u) { return {{PIECE0}}_gdot(0u, blk, i, xs); }
  return {{PIECE1}}_gdot(1u, blk, i, xs);
}

#include "gemv/q8x_{{Q8X}}.wgsl"

// Slot s's rows, bytes per row, first output column (slot 1 only when MIXED).
fn rows_of(s: u32) -> u32 { return select(D.rows - slot1_rows0(), slot1_rows0(), s == 0u); }
fn row_bytes(s: u32) -> u32 { return select(slot1_row_bytes(), D.row_bytes, s == 0u); }
fn first_col(s: u32) -> u32 { return select(slot1_rows0(), D.col0, s == 0u); }

// The bias of row c of slot s.
fn bias(s: u32, c: u32) -> f32 {
  if (!BIAS) { return 0.0; }
  if (MIXED && s == 1u) { return bias1(c); }
  return B[D.col0 + c];
}

// x vec4 i as the GEMV multiplies it, from the loaded v = X[i]: times the norm weights under HAS_NORM.
fn xw(i: u32, v: vec4<f32>) -> vec4<f32> {
  if (HAS_NORM) { return v * NW[i]; }
  return v;
}

fn act(x: f32) -> f32 { return {{ACT}}(x); }

// Weight row of slot j of the group whose first output column is c0. EXPERT GLU: the up rows are
// glu_up() rows after the gate rows (the experts' up weights after all their gate weights), columns past
// the last clamped to it (the binding ends at the last expert's last up row).
fn slot_row(c0: u32, j: u32) -> u32 {
  if (GLU && EXPERT) {
    let c = min(select(c0 + j - RO, c0 + j, j < RO), D.n - 1u);
    return select(c + glu_up(), c, j < RO);
  }
  if (GLU) { return select(c0 + j + D.n - RO, c0 + j, j < RO); }
  return c0 + j;
}

// The x vec4s of piece i of the block whose first element is e (times NW under HAS_NORM), and the sum
// of their raw squares (HAS_NORM).
struct XL { xs: XS, ss: f32 }

// x vec4 i. XCLAMP clamps the index into the array, as Dawn's bounds checks would: indices are in range
// either way, but the F16 GEMVs ran faster with the clamp (and the quantized float-dot ones slower), as
// measured; tuning.py sets it for F16.
const XCLAMP: bool = {{XCLAMP}};
fn xv(i: u32) -> vec4<f32> {
  if (XCLAMP) { return X[min(i, arrayLength(&X) - 1u)]; }
  return X[i];
}

// The first vec4 of x row m (MULTI; row 0 otherwise).
fn xrow(m: u32) -> u32 { return select(0u, x_of(m) * (D.k >> 2u), MULTI); }

fn xload(s: u32, e: u32, i: u32, m: u32) -> XL {
  var r: XL;
  let n = px(s);
  let xb = xrow(m);
  let i0 = (e + gx(s, i, 0u)) >> 2u; let i1 = (e + gx(s, i, 1u)) >> 2u;
  let i2 = (e + gx(s, i, 2u)) >> 2u; let i3 = (e + gx(s, i, 3u)) >> 2u;
  let i4 = (e + gx(s, i, 4u)) >> 2u; let i5 = (e + gx(s, i, 5u)) >> 2u;
  let i6 = (e + gx(s, i, 6u)) >> 2u; let i7 = (e + gx(s, i, 7u)) >> 2u;
  let v0 = xv(xb + i0);
  r.xs[0] = xw(i0, v0);
  var q = dot(v0, v0);
  if (n > 1u) { let v1 = xv(xb + i1); r.xs[1] = xw(i1, v1); q += dot(v1, v1); }
  if (n > 2u) {
    let v2 = xv(xb + i2); let v3 = xv(xb + i3);
    r.xs[2] = xw(i2, v2); r.xs[3] = xw(i3, v3); q += dot(v2, v2) + dot(v3, v3);
  }
  if (n > 4u) {
    let v4 = xv(xb + i4); let v5 = xv(xb + i5); let v6 = xv(xb + i6); let v7 = xv(xb + i7);
    r.xs[4] = xw(i4, v4); r.xs[5] = xw(i5, v5); r.xs[6] = xw(i6, v6); r.xs[7] = xw(i7, v7);
    q += dot(v4, v4) + dot(v5, v5) + dot(v6, v6) + dot(v7, v7);
  }
  r.ss = select(0.0, q, HAS_NORM);
  return r;
}

// x quantized once (with Q8X), in one layout: slot s's piece p has its int8 words j < PX at word
// j NP(s) + p of the slot's words (NP(s) pieces per row; consecutive lanes read consecutive words), its
// scale at PX NP(s) + p and the raw x^2 sum of its values (HAS_NORM) at (PX + 1) NP(s) + p. They are
// what xquant makes of xload's x, so the sums are bit for bit those of the GEMV quantizing for itself;
// a group reads PX + 2 words per piece instead of 32 f32 of x (and 32 of the norm weights).
// XQIN: written by this module's quantize_x entry, one dispatch before the GEMV, to a buffer bound as X
// (slot 1's words after slot 0's; row m's words at m * xq_row()).
const XQIN: bool = {{XQIN}};
@group(0) @binding(13) var<storage, read_write> XQO: array<u32>;

fn n_pieces(s: u32) -> u32 { return D.k / qk(s) * ppb(s); }
fn xq_at(s: u32) -> u32 { return select((px(0u) + 2u) * n_pieces(0u), 0u, s == 0u); }
fn xq_row() -> u32 { return xq_at(1u) + select(0u, (px(1u) + 2u) * n_pieces(1u), MIXED); }
fn xq_base(m: u32) -> u32 { return select(0u, x_of(m) * xq_row(), MULTI); }
fn xword(w: u32) -> u32 { return bitcast<u32>(X[w >> 2u][w & 3u]); }

// XSTAGE: each workgroup quantizes x itself, once, into workgroup memory (stage_x, before its groups
// start; a workgroup runs one slot, at word 0): no quantize dispatch, x read once per workgroup.
const XSTAGE: bool = {{XSTAGE}};
var<workgroup> xst: array<u32, {{XSWORDS}}>;

fn xqw(w: u32) -> u32 {
  if (XSTAGE) { return xst[w]; }
  return xword(w);
}

// A piece's x as the row dots take it: f32 values (float dots), int8 (Q8X) and the x^2 sum (HAS_NORM).
struct XP { xs: XS, xq: XQ, ss: f32 }

// Piece p of row m of slot s's x, quantized (the writers of the layout above).
fn xq_piece(s: u32, p: u32, m: u32) -> XP {
  let pp = ppb(s);
  let xl = xload(s, p / pp * qk(s), p % pp, m);
  return XP(xl.xs, xquant(xl.xs, px(s)), xl.ss);
}

// Call in uniform control flow (a workgroup runs one slot, and one x row m: row 0, or EXPERT's pair's).
fn stage_x(s: u32, lid: u32, m: u32) {
  let np = n_pieces(s); let n = px(s);
  for (var p = lid; p < np; p += WG) {
    let x = xq_piece(s, p, m);
    let xq = x.xq;
    xst[p] = xq.q[0];
    if (n > 1u) { xst[np + p] = xq.q[1]; }
    if (n > 2u) { xst[2u * np + p] = xq.q[2]; xst[3u * np + p] = xq.q[3]; }
    if (n > 4u) {
      xst[4u * np + p] = xq.q[4]; xst[5u * np + p] = xq.q[5]; xst[6u * np + p] = xq.q[6]; xst[7u * np + p] = xq.q[7];
    }
    xst[n * np + p] = bitcast<u32>(xq.d);
    xst[(n + 1u) * np + p] = bitcast<u32>(x.ss);
  }
  workgroupBarrier();
}

// Piece i of block b (piece p of the row) of row m of slot s's x.
fn xpiece(s: u32, b: u32, i: u32, p: u32, m: u32) -> XP {
  var r: XP;
  if (XQIN || XSTAGE) {
    let np = n_pieces(s); let n = px(s);
    let o = select(xq_at(s) + xq_base(m), 0u, XSTAGE) + p;
    r.xq.q[0] = xqw(o);
    if (n > 1u) { r.xq.q[1] = xqw(o + np); }
    if (n > 2u) { r.xq.q[2] = xqw(o + 2u * np); r.xq.q[3] = xqw(o + 3u * np); }
    if (n > 4u) {
      r.xq.q[4] = xqw(o + 4u * np); r.xq.q[5] = xqw(o + 5u * np);
      r.xq.q[6] = xqw(o + 6u * np); r.xq.q[7] = xqw(o + 7u * np);
    }
    r.xq.d = bitcast<f32>(xqw(o + n * np));
    r.ss = select(0.0, bitcast<f32>(xqw(o + (n + 1u) * np)), HAS_NORM);
    return r;
  }
  let xl = xload(s, b * qk(s), i, m);
  r.xs = xl.xs; r.xq = xprep(s, xl.xs); r.ss = xl.ss;
  return r;
}

fn quantize_piece(s: u32, p: u32, m: u32) {
  let x = xq_piece(s, p, m);
  let xq = x.xq;
  let np = n_pieces(s); let o = xq_at(s) + xq_base(m) + p; let n = px(s);
  XQO[o] = xq.q[0];
  if (n > 1u) { XQO[o + np] = xq.q[1]; }
  if (n > 2u) { XQO[o + 2u * np] = xq.q[2]; XQO[o + 3u * np] = xq.q[3]; }
  if (n > 4u) {
    XQO[o + 4u * np] = xq.q[4]; XQO[o + 5u * np] = xq.q[5]; XQO[o + 6u * np] = xq.q[6]; XQO[o + 7u * np] = xq.q[7];
  }
  XQO[o + n * np] = bitcast<u32>(xq.d);
  XQO[o + (n + 1u) * np] = bitcast<u32>(x.ss);
}

// The XQIN GEMV's x: one invocation per piece of every slot and row (X the f32 rows, NW the norm weights).
@compute @workgroup_size(64)
fn quantize_x(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n0 = n_pieces(0u);
  let per_row = n0 + select(0u, n_pieces(1u), MIXED);
  var g = gid.x + gid.y * nwg.x * 64u;
  var m = 0u;
  if (MULTI) { m = g / per_row; g = g % per_row; if (m >= x_rows()) { return; } }
  if (D._p0 == 0xFFFFFFFFu) { XQO[0] = bitcast<u32>(NW[0].x); }   // never (keeps NW in the layout)
  if (g < n0) { quantize_piece(0u, g, m); } else if (MIXED && g < per_row) { quantize_piece(1u, g - n0, m); }
}

fn row_at(s: u32, r: u32) -> u32 { return expert_base() + min(r, rows_of(s) - 1u) * row_bytes(s); }

// Lane gl's partial sums of the R rows of slot s whose first output column is c0, for x rows m0 ..
// m0 + XR - 1 (the last block's rows past D.m repeat row D.m - 1 and are not stored), and of x^2
// (HAS_NORM): acc[j * R + r] for x row j and weight row r, then the XR x^2 sums at NA + j.
struct Partial { acc: array<f32, NVA> }

// x row j of the block starting at m0 (MULTI).
fn xr_of(m0: u32, j: u32) -> u32 { return min(m0 + j, D.m - 1u); }

fn rows_dot(s: u32, c0: u32, gl: u32, m0: u32) -> Partial {
  // Rows and sums are scalars, unrolled on the constants R and XR (generated: ops/matmul.py
  // gemv_rows_code): no private array in the hot loop.
  let w0 = row_at(s, slot_row(c0, 0u)); let w1 = row_at(s, slot_row(c0, 1u));
  let w2 = row_at(s, slot_row(c0, 2u)); let w3 = row_at(s, slot_row(c0, 3u));
  let w4 = row_at(s, slot_row(c0, 4u)); let w5 = row_at(s, slot_row(c0, 5u));
  let w6 = row_at(s, slot_row(c0, 6u)); let w7 = row_at(s, slot_row(c0, 7u));
{{ACC_DECL}}
  let pp = ppb(s);
  let np = D.k / qk(s) * pp;
  var p = gl;
  if (U2) {   // two pieces per step: both pieces' loads are issued before either is reduced
    for (; p + TPR < np; p += 2u * TPR) {
      let q = p + TPR;
      let b = p / pp; let i = p % pp;
      let c = q / pp; let j = q % pp;
      let o = b * qb(s); let e = c * qb(s);
{{U2_STEP}}
    }
  }
  for (; p < np; p += TPR) {
    let b = p / pp;
    let i = p % pp;
    let o = b * qb(s);
{{STEP}}
  }
  return Partial(array<f32, NVA>({{ACC_LIST}}));
}

// The multi-row integer-dot GEMV's rows_dot, one per slot (generated: ops/matmul.py gemv_wrows_code): each
// step loads and decodes the R weight rows' pieces once (<piece>_wload) and reduces them against every x
// row in registers (<piece>_wdot), instead of once per x row; a row's sums keep the single-row order.
{{WROWS}}

// PERSIST: the host launches fewer workgroups than the D._p1 the rows need, and each takes workgroups g,
// g + launched, ... in turn: x staged (XSTAGE) once per launched workgroup instead of once per D._p1.
const PERSIST: bool = {{PERSIST}};

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let grp = lane.lid / TPR;
  let gl = lane.lid % TPR;
  stage_table(lane.lid);
  var g = wid.y * nwg.x + wid.x;
  var m0 = 0u;
  if (SUMK) { m0 = g % NXB * GPW; g /= NXB; }   // the token's first pair (NXB: tokens)
  else if (MULTI) { m0 = g % NXB * XR; g /= NXB; }
  if (!expert_begin(m0)) { return; }   // EXPERT: another dispatch binds this pair's expert (uniform)
  var mp = m0;                         // the group's x row (its pair's, SUMK)
  if (SUMK) { mp = m0 + grp; _ = expert_begin(mp); }   // one binding holds every expert (no return)
  var s = 0u;
  if (MIXED && g >= slot1_wg0()) { s = 1u; g -= slot1_wg0(); }
  if (XSTAGE) { if (MIXED && s == 1u) { stage_x(1u, lane.lid, m0); } else { stage_x(0u, lane.lid, m0); } }
  loop {
    let c0 = select((g * GPW + grp) * RO, g * RO, SUMK);   // the group's first output column in its slot
    var pt: Partial;
    if (MIXED && s == 1u) { pt = {{DOT1}}(1u, c0, gl, mp); } else { pt = {{DOT0}}(0u, c0, gl, mp); }
    // Never true (the host writes 0): keeps every view of the weights in the auto bind-group layout.
    if (D._p0 == 0xFFFFFFFFu) { pt.acc[0] += f32(W[0] ^ W4[0].x ^ slot1_keep()) + B[0] + NW[0].x; }
    let tq = group_sum(lane, grp, gl, pt.acc);
    var t = tq.x;
    if (HAS_NORM) { t *= 1.0 / sqrt(tq.y / f32(D.k) + EPS); }
    // lane gl < NA holds weight row gl % R of x row m0 + gl / R
    if (SUMK) {      // XR = 1: lane gl < R holds column c0 + gl of pair mp
      if (gl < R) { tot[grp * NA + gl] = select(0.0, t * B[mp], expert_live(mp)); }
      workgroupBarrier();
      if (grp == 0u && gl < R && c0 + gl < D.n) {
        var y = 0.0;
        for (var j = 0u; j < GPW; j++) { y += tot[j * NA + gl]; }   // in slot order, as moe_sum adds
        store(m0 / GPW, c0 + gl, y);
      }
    } else if (GLU) {
      if (gl < NA) { tot[grp * NA + gl] = t; }
      workgroupBarrier();
      let xj = gl / RO; let c = gl % RO;
      if (gl < RO * XR && c0 + c < D.n && m0 + xj < D.m) {
        let tb = grp * NA + xj * R + c;
        store(m0 + xj, c0 + c, select(0.0, act(tot[tb]) * tot[tb + RO], expert_live(m0 + xj)));
      }
    } else {
      let xj = gl / R; let r = gl % R;
      if (gl < NA && c0 + r < rows_of(s) && m0 + xj < D.m) {
        store(m0 + xj, first_col(s) + c0 + r, select(0.0, t + bias(s, c0 + r), expert_live(m0 + xj)));
      }
    }
    g += nwg.x * nwg.y;
    if (!PERSIST || g >= D._p1) { break; }
    workgroupBarrier();   // every lane is done with red and tot before the next turn writes them
  }
}
