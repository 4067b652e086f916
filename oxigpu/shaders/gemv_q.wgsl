// Quantized GEMV for decode: y[n] = sum_k x[k] * W[n, k] (+ bias), x one row, W raw GGUF blocks.
// A workgroup is GPW groups of TPR lanes; a group computes R consecutive output rows. Its lanes take
// consecutive "pieces" of the row (gemv/<piece>.wgsl: a fixed part of a block, loaded with as few and
// as wide loads as its layout allows), so a warp streams contiguous bytes; each lane loads the x values
// of its piece once and applies them to all R rows. Totals: gemv/reduce_{sg,wg}.wgsl.
// GLU (matmul_glu): W holds the gate rows then the up rows (D.n each); a group's first R/2 rows are gate
// rows c0.., its last R/2 the matching up rows, and it stores ACT(x Wg) * (x Wu) for its R/2 columns.
// HAS_NORM: x is RMS-normalized in the prologue (each workgroup sums x^2 itself): the GEMV reads x * NW
// and scales its totals by 1 / sqrt(mean(x^2) + EPS), so the normed row is never written.
// Defines: QUANT, PIECE, HAS_BIAS, HAS_RES, NSEG, TPR, R, GPW, REDUCE, MAGIC, PPB32, GLU, ACT, HAS_NORM, EPS
// (see ops/matmul.py).
#include "math.wgsl"
#include "common/matmul_io.wgsl"
#include "quant/{{QUANT}}.wgsl"
#include "gemv/common.wgsl"
#include "gemv/{{PIECE}}.wgsl"

const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;      // 1, 2, 4 or 8
const GPW: u32 = {{GPW}}u;
const WG: u32 = TPR * GPW;
const GLU: bool = {{GLU}};
const RO: u32 = select(R, R / 2u, GLU);   // output columns per group

var<workgroup> tot: array<f32, GPW * R>;   // GLU: the group's row totals, exchanged between lanes

@group(0) @binding(8) var<storage, read> NW: array<vec4<f32>>;
const HAS_NORM: bool = {{HAS_NORM}};
const EPS: f32 = {{EPS}};
var<workgroup> ssq: array<f32, WG>;

// x vec4 i as the GEMV multiplies it: times the norm weights under HAS_NORM.
fn xv(i: u32) -> vec4<f32> {
  if (HAS_NORM) { return X[i] * NW[i]; }
  return X[i];
}

// 1 / sqrt(mean(x^2) + EPS) (a workgroup tree over x; uniform control flow), or 1 without HAS_NORM.
fn norm_scale(lid: u32) -> f32 {
  if (!HAS_NORM) { return 1.0; }
  var ss = 0.0;
  for (var i = lid; i < D.k / 4u; i += WG) { let v = X[i]; ss += dot(v, v); }
  ssq[lid] = ss;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { ssq[lid] += ssq[lid + s]; }
    workgroupBarrier();
  }
  return 1.0 / sqrt(ssq[0] / f32(D.k) + EPS);
}

fn act(x: f32) -> f32 { return {{ACT}}(x); }

// Weight row of slot j of the group whose first output column is c0.
fn slot_row(c0: u32, j: u32) -> u32 {
  if (GLU) { return select(c0 + j + D.n - RO, c0 + j, j < RO); }
  return c0 + j;
}

#include "gemv/reduce_{{REDUCE}}.wgsl"

// The x vec4s of piece i of the block whose first element is e.
fn xload(e: u32, i: u32) -> XS {
  var xs: XS;
  xs[0] = xv((e + gx(i, 0u)) >> 2u);
  if (PX > 1u) { xs[1] = xv((e + gx(i, 1u)) >> 2u); }
  if (PX > 2u) { xs[2] = xv((e + gx(i, 2u)) >> 2u); xs[3] = xv((e + gx(i, 3u)) >> 2u); }
  if (PX > 4u) {
    xs[4] = xv((e + gx(i, 4u)) >> 2u); xs[5] = xv((e + gx(i, 5u)) >> 2u);
    xs[6] = xv((e + gx(i, 6u)) >> 2u); xs[7] = xv((e + gx(i, 7u)) >> 2u);
  }
  return xs;
}

fn row_at(r: u32) -> u32 { return min(r, D.rows - 1u) * D.row_bytes; }

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let grp = lane.lid / TPR;
  let gl = lane.lid % TPR;
  let r0 = ((wid.y * nwg.x + wid.x) * GPW + grp) * RO;
  // Rows and sums are scalars, unrolled on the constant R: no private array in the hot loop.
  let w0 = row_at(slot_row(r0, 0u)); let w1 = row_at(slot_row(r0, 1u)); let w2 = row_at(slot_row(r0, 2u));
  let w3 = row_at(slot_row(r0, 3u)); let w4 = row_at(slot_row(r0, 4u)); let w5 = row_at(slot_row(r0, 5u));
  let w6 = row_at(slot_row(r0, 6u)); let w7 = row_at(slot_row(r0, 7u));
  var a0 = 0.0; var a1 = 0.0; var a2 = 0.0; var a3 = 0.0; var a4 = 0.0; var a5 = 0.0; var a6 = 0.0; var a7 = 0.0;
  let scale = norm_scale(lane.lid);
  let np = D.k / QK * PPB;
  for (var p = gl; p < np; p += TPR) {
    let b = p / PPB;
    let i = p % PPB;
    let xs = xload(b * QK, i);
    let o = b * QB;
    a0 += gdot(w0 + o, i, xs);
    if (R > 1u) { a1 += gdot(w1 + o, i, xs); }
    if (R > 2u) { a2 += gdot(w2 + o, i, xs); a3 += gdot(w3 + o, i, xs); }
    if (R > 4u) {
      a4 += gdot(w4 + o, i, xs); a5 += gdot(w5 + o, i, xs);
      a6 += gdot(w6 + o, i, xs); a7 += gdot(w7 + o, i, xs);
    }
  }
  // Never true (the host writes 0): keeps both views of the weights in the auto bind-group layout.
  if (D._p0 == 0xFFFFFFFFu) { a0 += f32(W[0] ^ W4[0].x); }
  let t = group_sum(lane, grp, gl, array<f32, 8>(a0, a1, a2, a3, a4, a5, a6, a7)) * scale;
  if (GLU) {
    if (gl < R) { tot[grp * R + gl] = t; }
    workgroupBarrier();
    if (gl < RO && r0 + gl < D.n) { store(0u, r0 + gl, act(tot[grp * R + gl]) * tot[grp * R + gl + RO]); }
  } else if (gl < R && r0 + gl < D.rows) {
    store(0u, D.col0 + r0 + gl, t);
  }
}
