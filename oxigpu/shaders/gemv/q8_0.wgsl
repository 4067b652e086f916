// Q8_0 pieces (34-byte blocks: d f16, qs[32] int8): QW consecutive words of qs (4 QW elements); PPB32
// (a define: 1, 2 or 4) pieces per block. Bytes are biased by 128 (xor 0x80) so they convert as
// unsigned values.
const q8_0_QK: u32 = 32u;
const q8_0_QB: u32 = 34u;
const q8_0_PPB: u32 = {{PPB32}}u;
const q8_0_QW: u32 = 8u / q8_0_PPB;
const q8_0_PX: u32 = q8_0_QW;

// The GPU holds the blocks in pairs (backends/wgpu/layout.py): qs 4-aligned at pair_body(blk), d apart.

fn q8_0_gx(i: u32, j: u32) -> u32 { return 4u * (q8_0_QW * i + j); }

fn q8_0_dot4(s: u32, b: u32, x: vec4<f32>) -> f32 { return dot(b2f(lwa(s, b) ^ 0x80808080u, 128.0), x); }

fn q8_0_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  const QW = q8_0_QW;
  let q = pair_body(blk) + 4u * QW * i;
  var t = q8_0_dot4(s, q, xs[0]);
  if (QW > 1u) { t += q8_0_dot4(s, q + 4u, xs[1]); }
  if (QW > 2u) { t += q8_0_dot4(s, q + 8u, xs[2]) + q8_0_dot4(s, q + 12u, xs[3]); }
  if (QW > 4u) {
    t += q8_0_dot4(s, q + 16u, xs[4]) + q8_0_dot4(s, q + 20u, xs[5]) + q8_0_dot4(s, q + 24u, xs[6]) +
         q8_0_dot4(s, q + 28u, xs[7]);
  }
  return pair_h16(s, blk, q8_0_QB) * t;
}

// The piece's words and scale (wload), once for every x row of a multi-row GEMV (wdot); qdot: both.
struct q8_0_W { q: array<u32, 8>, d: f32 }

fn q8_0_wload(s: u32, blk: u32, i: u32) -> q8_0_W {
  const QW = q8_0_QW;
  let q = pair_body(blk) + 4u * QW * i;
  var w: q8_0_W;
  w.q[0] = lwa(s, q);
  if (QW > 1u) { w.q[1] = lwa(s, q + 4u); }
  if (QW > 2u) { w.q[2] = lwa(s, q + 8u); w.q[3] = lwa(s, q + 12u); }
  if (QW > 4u) { w.q[4] = lwa(s, q + 16u); w.q[5] = lwa(s, q + 20u); w.q[6] = lwa(s, q + 24u); w.q[7] = lwa(s, q + 28u); }
  w.d = pair_h16(s, blk, q8_0_QB);
  return w;
}

fn q8_0_wdot(w: q8_0_W, xq: XQ) -> f32 {
  const QW = q8_0_QW;
  var t = idot(w.q[0], xq.q[0]);
  if (QW > 1u) { t += idot(w.q[1], xq.q[1]); }
  if (QW > 2u) { t += idot(w.q[2], xq.q[2]) + idot(w.q[3], xq.q[3]); }
  if (QW > 4u) { t += idot(w.q[4], xq.q[4]) + idot(w.q[5], xq.q[5]) + idot(w.q[6], xq.q[6]) + idot(w.q[7], xq.q[7]); }
  return w.d * xq.d * f32(t);
}

fn q8_0_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  const QW = q8_0_QW;
  let q = pair_body(blk) + 4u * QW * i;
  var t = idot(lwa(s, q), xq.q[0]);
  if (QW > 1u) { t += idot(lwa(s, q + 4u), xq.q[1]); }
  if (QW > 2u) { t += idot(lwa(s, q + 8u), xq.q[2]) + idot(lwa(s, q + 12u), xq.q[3]); }
  if (QW > 4u) {
    t += idot(lwa(s, q + 16u), xq.q[4]) + idot(lwa(s, q + 20u), xq.q[5]) + idot(lwa(s, q + 24u), xq.q[6]) +
         idot(lwa(s, q + 28u), xq.q[7]);
  }
  return pair_h16(s, blk, q8_0_QB) * xq.d * f32(t);
}
