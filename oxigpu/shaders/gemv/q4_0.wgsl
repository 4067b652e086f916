// Q4_0 pieces: QW words of qs; byte j holds element j (low nibble) and j + 16 (high), so a piece of
// words [QW i, QW i + QW) covers elements 4 QW i + [0, 4 QW) and 16 + the same. PPB32: 1, 2 or 4.
const PPB: u32 = {{PPB32}}u;
const QW: u32 = 4u / PPB;
const PX: u32 = 2u * QW;

fn gx(i: u32, j: u32) -> u32 { return select(16u, 0u, j < QW) + 4u * (QW * i + j % QW); }

fn gdot(blk: u32, i: u32, xs: array<vec4<f32>, PX>) -> f32 {
  let q0 = blk + 2u + 4u * QW * i;
  var s = 0.0;
  for (var j = 0u; j < QW; j++) {
    let w = lw1(q0 + 4u * j);
    s += dot(b2f(w & 0x0F0F0F0Fu, 8.0), xs[j]) + dot(b2f((w >> 4u) & 0x0F0F0F0Fu, 8.0), xs[QW + j]);
  }
  return h16(blk) * s;
}
