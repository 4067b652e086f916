// Q5_0 pieces: as Q4_0 (same element order), plus bit e of the qh word as bit 4 of element e.
const PPB: u32 = {{PPB32}}u;
const QW: u32 = 4u / PPB;
const PX: u32 = 2u * QW;

fn gx(i: u32, j: u32) -> u32 { return select(16u, 0u, j < QW) + 4u * (QW * i + j % QW); }

// Word w of qs holds elements e .. e + 3 (low nibbles) and e + 16 .. e + 19 (high).
fn q5dot(w: u32, qh: u32, e: u32, xl: vec4<f32>, xh: vec4<f32>) -> f32 {
  let lo = (w & 0x0F0F0F0Fu) | (spread4((qh >> e) & 0xFu) << 4u);
  let hi = ((w >> 4u) & 0x0F0F0F0Fu) | (spread4((qh >> (e + 16u)) & 0xFu) << 4u);
  return dot(b2f(lo, 16.0), xl) + dot(b2f(hi, 16.0), xh);
}

fn gdot(blk: u32, i: u32, xs: XS) -> f32 {
  let qh = lw1(blk + 2u);
  let q = blk + 6u + 4u * QW * i;
  let e = 4u * QW * i;
  var s = q5dot(lw1(q), qh, e, xs[0], xs[QW]);
  if (QW > 1u) { s += q5dot(lw1(q + 4u), qh, e + 4u, xs[1], xs[QW + 1u]); }
  if (QW > 2u) {
    s += q5dot(lw1(q + 8u), qh, e + 8u, xs[2], xs[QW + 2u]) + q5dot(lw1(q + 12u), qh, e + 12u, xs[3], xs[QW + 3u]);
  }
  return h16(blk) * s;
}
