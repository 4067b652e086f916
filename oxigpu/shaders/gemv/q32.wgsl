// Generic GEMV pieces through a type's integer-dot GEMM loader (gemm_q8/<type>.wgsl q32: a 32-element
// sub-block as int8 with its scales): one sub-block per piece, so every type with a loader gets integer
// dots (qdot) in the GEMV too. Used for the types without a specialized piece file (Q4_1, Q5_1, Q3_K,
// Q5_K, the IQ and TQ types). The loader reads W, so this piece serves slot 0 only (as dq8 does).
#include "gemm_q8/q32.wgsl"
const w_base: u32 = 0u;   // q32_at's row base (the GEMMs' common/gemm_id_*.wgsl; this piece reads rows by byte)
#include "gemm_q8/{{QUANT}}.wgsl"
const q32_QK: u32 = QK;
const q32_QB: u32 = QB;
const q32_PPB: u32 = QK / 32u;
const q32_PX: u32 = 8u;

fn q32_gx(i: u32, j: u32) -> u32 { return 32u * i + 4u * j; }

// The sub-block's scaled dot: scale(s) times the dot of its int8 values (per 16 with FK 16), minus the
// min times the sum of x (HM); lo, hi: the dots of elements 0..15 and 16..31, sx: the sum of x.
fn q32_comb(q: Q32, lo: f32, hi: f32, sx: f32) -> f32 {
  if (FK == 16u) { return q.a * lo + q.b * hi; }
  var t = q.a * (lo + hi);
  if (HM == 1u) { t -= q.b * sx; }
  return t;
}

fn q32_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let q = q32(blk, i);
  let lo = dot(sbytes4(q.lo.x), xs[0]) + dot(sbytes4(q.lo.y), xs[1]) +
           dot(sbytes4(q.lo.z), xs[2]) + dot(sbytes4(q.lo.w), xs[3]);
  let hi = dot(sbytes4(q.hi.x), xs[4]) + dot(sbytes4(q.hi.y), xs[5]) +
           dot(sbytes4(q.hi.z), xs[6]) + dot(sbytes4(q.hi.w), xs[7]);
  var sx = 0.0;
  if (HM == 1u) { sx = hsum(xs[0] + xs[1] + xs[2] + xs[3] + xs[4] + xs[5] + xs[6] + xs[7]); }
  return q32_comb(q, lo, hi, sx);
}

// The multi-row GEMV's split of qdot: the sub-block loaded once (wload), reduced per x row (wdot).
alias q32_W = Q32;
fn q32_wload(s: u32, blk: u32, i: u32) -> Q32 { return q32(blk, i); }

fn q32_wdot(q: Q32, xq: XQ) -> f32 {
  let lo = idot(q.lo.x, xq.q[0]) + idot(q.lo.y, xq.q[1]) + idot(q.lo.z, xq.q[2]) + idot(q.lo.w, xq.q[3]);
  let hi = idot(q.hi.x, xq.q[4]) + idot(q.hi.y, xq.q[5]) + idot(q.hi.z, xq.q[6]) + idot(q.hi.w, xq.q[7]);
  var sx = 0;
  if (HM == 1u) { sx = xsum(xq, 0u, 8u); }
  return xq.d * q32_comb(q, f32(lo), f32(hi), f32(sx));
}

fn q32_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  let q = q32(blk, i);
  let lo = idot(q.lo.x, xq.q[0]) + idot(q.lo.y, xq.q[1]) + idot(q.lo.z, xq.q[2]) + idot(q.lo.w, xq.q[3]);
  let hi = idot(q.hi.x, xq.q[4]) + idot(q.hi.y, xq.q[5]) + idot(q.hi.z, xq.q[6]) + idot(q.hi.w, xq.q[7]);
  var sx = 0;
  if (HM == 1u) { sx = xsum(xq, 0u, 8u); }
  return xq.d * q32_comb(q, f32(lo), f32(hi), f32(sx));
}
