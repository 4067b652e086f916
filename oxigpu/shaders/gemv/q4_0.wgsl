// Q4_0 pieces (18-byte blocks: d f16, qs[16]): QW words of qs; byte j holds element j (low nibble) and
// j + 16 (high), so a piece of words [QW i, QW i + QW) covers elements 4 QW i + [0, 4 QW) and 16 + the
// same. PPB32: 1, 2 or 4.
const q4_0_QK: u32 = 32u;
const q4_0_QB: u32 = 18u;
const q4_0_PPB: u32 = {{PPB32}}u;
const q4_0_QW: u32 = 4u / q4_0_PPB;
const q4_0_PX: u32 = 2u * q4_0_QW;

// The GPU holds the blocks in pairs (backends/wgpu/layout.py): qs 4-aligned at pair_body(blk), d apart.

fn q4_0_gx(i: u32, j: u32) -> u32 {
  return select(16u, 0u, j < q4_0_QW) + 4u * (q4_0_QW * i + j % q4_0_QW);
}

// Word w of qs as its low nibbles (elements e .. e + 3) and high ones (e + 16 .. e + 19).
fn q4_0_nibs(w: u32) -> vec2<u32> {
  return vec2<u32>(w & 0x0F0F0F0Fu, (w >> 4u) & 0x0F0F0F0Fu);
}

fn q4_0_dot4(w: u32, xl: vec4<f32>, xh: vec4<f32>) -> f32 {
  let v = q4_0_nibs(w);
  return dot(b2f(v.x, 8.0), xl) + dot(b2f(v.y, 8.0), xh);
}

fn q4_0_idot4(w: u32, xl: u32, xh: u32) -> i32 {
  let v = q4_0_nibs(w);
  return idot(v.x, xl) + idot(v.y, xh);
}

fn q4_0_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  const QW = q4_0_QW;
  let q = pair_body(blk) + 4u * QW * i;
  var t = q4_0_dot4(lwa(s, q), xs[0], xs[QW]);
  if (QW > 1u) { t += q4_0_dot4(lwa(s, q + 4u), xs[1], xs[QW + 1u]); }
  if (QW > 2u) { t += q4_0_dot4(lwa(s, q + 8u), xs[2], xs[QW + 2u]) + q4_0_dot4(lwa(s, q + 12u), xs[3], xs[QW + 3u]); }
  return pair_h16(s, blk, q4_0_QB) * t;
}

// As gdot, on int8 x (low nibbles against xq.q[0..QW), high ones against xq.q[QW..2 QW)); the -8
// offset via the x sum.
// The multi-row GEMV's split of qdot: the piece's words and scale (wload), reduced per x row (wdot).
struct q4_0_W { q: array<u32, 4>, d: f32 }

fn q4_0_wload(s: u32, blk: u32, i: u32) -> q4_0_W {
  const QW = q4_0_QW;
  let q = pair_body(blk) + 4u * QW * i;
  var w: q4_0_W;
  w.q[0] = lwa(s, q);
  if (QW > 1u) { w.q[1] = lwa(s, q + 4u); }
  if (QW > 2u) { w.q[2] = lwa(s, q + 8u); w.q[3] = lwa(s, q + 12u); }
  w.d = pair_h16(s, blk, q4_0_QB);
  return w;
}

fn q4_0_wdot(w: q4_0_W, xq: XQ) -> f32 {
  const QW = q4_0_QW;
  var t = q4_0_idot4(w.q[0], xq.q[0], xq.q[QW]);
  if (QW > 1u) { t += q4_0_idot4(w.q[1], xq.q[1], xq.q[QW + 1u]); }
  if (QW > 2u) { t += q4_0_idot4(w.q[2], xq.q[2], xq.q[QW + 2u]) + q4_0_idot4(w.q[3], xq.q[3], xq.q[QW + 3u]); }
  return w.d * xq.d * f32(t - 8 * xsum(xq, 0u, 2u * QW));
}

fn q4_0_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  const QW = q4_0_QW;
  let q = pair_body(blk) + 4u * QW * i;
  var t = q4_0_idot4(lwa(s, q), xq.q[0], xq.q[QW]);
  if (QW > 1u) { t += q4_0_idot4(lwa(s, q + 4u), xq.q[1], xq.q[QW + 1u]); }
  if (QW > 2u) {
    t += q4_0_idot4(lwa(s, q + 8u), xq.q[2], xq.q[QW + 2u]) + q4_0_idot4(lwa(s, q + 12u), xq.q[3], xq.q[QW + 3u]);
  }
  return pair_h16(s, blk, q4_0_QB) * xq.d * f32(t - 8 * xsum(xq, 0u, 2u * QW));
}
