// Q5_0 pieces: as Q4_0 (same element order), plus bit e of the qh word as bit 4 of element e.
const PPB: u32 = {{PPB32}}u;
const QW: u32 = 4u / PPB;
const PX: u32 = 2u * QW;

fn gx(i: u32, j: u32) -> u32 { return select(16u, 0u, j < QW) + 4u * (QW * i + j % QW); }

fn gdot(blk: u32, i: u32, xs: array<vec4<f32>, PX>) -> f32 {
  let qh = lw1(blk + 2u);
  let q0 = blk + 6u + 4u * QW * i;
  var s = 0.0;
  for (var j = 0u; j < QW; j++) {
    let w = lw1(q0 + 4u * j);
    let e = 4u * (QW * i + j);
    let lo = (w & 0x0F0F0F0Fu) | (spread4((qh >> e) & 0xFu) << 4u);
    let hi = ((w >> 4u) & 0x0F0F0F0Fu) | (spread4((qh >> (e + 16u)) & 0xFu) << 4u);
    s += dot(b2f(lo, 16.0), xs[j]) + dot(b2f(hi, 16.0), xs[QW + j]);
  }
  return h16(blk) * s;
}
