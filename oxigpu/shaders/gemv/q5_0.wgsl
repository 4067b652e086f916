// Q5_0 pieces (22-byte blocks: d f16, qh u32, qs[16]): as Q4_0 (same element order), plus bit e of the
// qh word as bit 4 of element e. On the GPU in pairs (backends/wgpu/layout.py): qh and qs 4-aligned from
// pair_body(blk), d apart.
const q5_0_QK: u32 = 32u;
const q5_0_QB: u32 = 22u;
const q5_0_PPB: u32 = {{PPB32}}u;
const q5_0_QW: u32 = 4u / q5_0_PPB;
const q5_0_PX: u32 = 2u * q5_0_QW;

fn q5_0_gx(i: u32, j: u32) -> u32 {
  return select(16u, 0u, j < q5_0_QW) + 4u * (q5_0_QW * i + j % q5_0_QW);
}

// Word w of qs holds elements e .. e + 3 (low nibbles) and e + 16 .. e + 19 (high): their 5-bit values.
fn q5_0_bytes(w: u32, qh: u32, e: u32) -> vec2<u32> {
  return vec2<u32>((w & 0x0F0F0F0Fu) | (spread4((qh >> e) & 0xFu) << 4u),
                   ((w >> 4u) & 0x0F0F0F0Fu) | (spread4((qh >> (e + 16u)) & 0xFu) << 4u));
}

fn q5_0_dot4(w: u32, qh: u32, e: u32, xl: vec4<f32>, xh: vec4<f32>) -> f32 {
  let v = q5_0_bytes(w, qh, e);
  return dot(b2f(v.x, 16.0), xl) + dot(b2f(v.y, 16.0), xh);
}

fn q5_0_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  const QW = q5_0_QW;
  let qh = lwa(s, pair_body(blk));
  let q = pair_body(blk) + 4u + 4u * QW * i;
  let e = 4u * QW * i;
  var t = q5_0_dot4(lwa(s, q), qh, e, xs[0], xs[QW]);
  if (QW > 1u) { t += q5_0_dot4(lwa(s, q + 4u), qh, e + 4u, xs[1], xs[QW + 1u]); }
  if (QW > 2u) {
    t += q5_0_dot4(lwa(s, q + 8u), qh, e + 8u, xs[2], xs[QW + 2u]) +
         q5_0_dot4(lwa(s, q + 12u), qh, e + 12u, xs[3], xs[QW + 3u]);
  }
  return pair_h16(s, blk, q5_0_QB) * t;
}

fn q5_0_idot4(w: u32, qh: u32, e: u32, xl: u32, xh: u32) -> i32 {
  let v = q5_0_bytes(w, qh, e);
  return idot(v.x, xl) + idot(v.y, xh);
}

// As gdot, on int8 x; the -16 offset via the x sum.
// The multi-row GEMV's split of qdot: the piece's 5-bit bytes and scale (wload), reduced per x row (wdot).
struct q5_0_W { q: array<vec2<u32>, 4>, d: f32 }

fn q5_0_wload(s: u32, blk: u32, i: u32) -> q5_0_W {
  const QW = q5_0_QW;
  let qh = lwa(s, pair_body(blk));
  let q = pair_body(blk) + 4u + 4u * QW * i;
  let e = 4u * QW * i;
  var w: q5_0_W;
  w.q[0] = q5_0_bytes(lwa(s, q), qh, e);
  if (QW > 1u) { w.q[1] = q5_0_bytes(lwa(s, q + 4u), qh, e + 4u); }
  if (QW > 2u) { w.q[2] = q5_0_bytes(lwa(s, q + 8u), qh, e + 8u); w.q[3] = q5_0_bytes(lwa(s, q + 12u), qh, e + 12u); }
  w.d = pair_h16(s, blk, q5_0_QB);
  return w;
}

fn q5_0_wdot(w: q5_0_W, xq: XQ) -> f32 {
  const QW = q5_0_QW;
  var t = idot(w.q[0].x, xq.q[0]) + idot(w.q[0].y, xq.q[QW]);
  if (QW > 1u) { t += idot(w.q[1].x, xq.q[1]) + idot(w.q[1].y, xq.q[QW + 1u]); }
  if (QW > 2u) {
    t += idot(w.q[2].x, xq.q[2]) + idot(w.q[2].y, xq.q[QW + 2u]) + (idot(w.q[3].x, xq.q[3]) + idot(w.q[3].y, xq.q[QW + 3u]));
  }
  return w.d * xq.d * f32(t - 16 * xsum(xq, 0u, 2u * QW));
}

fn q5_0_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  const QW = q5_0_QW;
  let qh = lwa(s, pair_body(blk));
  let q = pair_body(blk) + 4u + 4u * QW * i;
  let e = 4u * QW * i;
  var t = q5_0_idot4(lwa(s, q), qh, e, xq.q[0], xq.q[QW]);
  if (QW > 1u) { t += q5_0_idot4(lwa(s, q + 4u), qh, e + 4u, xq.q[1], xq.q[QW + 1u]); }
  if (QW > 2u) {
    t += q5_0_idot4(lwa(s, q + 8u), qh, e + 8u, xq.q[2], xq.q[QW + 2u]) +
         q5_0_idot4(lwa(s, q + 12u), qh, e + 12u, xq.q[3], xq.q[QW + 3u]);
  }
  return pair_h16(s, blk, q5_0_QB) * xq.d * f32(t - 16 * xsum(xq, 0u, 2u * QW));
}
