// Q4_0 pieces: QW words of qs; byte j holds element j (low nibble) and j + 16 (high), so a piece of
// words [QW i, QW i + QW) covers elements 4 QW i + [0, 4 QW) and 16 + the same. PPB32: 1, 2 or 4.
const PPB: u32 = {{PPB32}}u;
const QW: u32 = 4u / PPB;
const PX: u32 = 2u * QW;

fn gx(i: u32, j: u32) -> u32 { return select(16u, 0u, j < QW) + 4u * (QW * i + j % QW); }

fn q4dot(w: u32, xl: vec4<f32>, xh: vec4<f32>) -> f32 {
  return dot(b2f(w & 0x0F0F0F0Fu, 8.0), xl) + dot(b2f((w >> 4u) & 0x0F0F0F0Fu, 8.0), xh);
}

fn gdot(blk: u32, i: u32, xs: XS) -> f32 {
  let q = blk + 2u + 4u * QW * i;
  var s = q4dot(lw1(q), xs[0], xs[QW]);
  if (QW > 1u) { s += q4dot(lw1(q + 4u), xs[1], xs[QW + 1u]); }
  if (QW > 2u) { s += q4dot(lw1(q + 8u), xs[2], xs[QW + 2u]) + q4dot(lw1(q + 12u), xs[3], xs[QW + 3u]); }
  return h16(blk) * s;
}
