// Q8_0 pieces: QW consecutive words of qs (4 QW elements); PPB32 (a define: 1, 2 or 4) pieces per block.
// Bytes are biased by 128 (xor 0x80) so they convert as unsigned values.
const PPB: u32 = {{PPB32}}u;
const QW: u32 = 8u / PPB;
const PX: u32 = QW;

fn gx(i: u32, j: u32) -> u32 { return 4u * (QW * i + j); }

fn gdot(blk: u32, i: u32, xs: array<vec4<f32>, PX>) -> f32 {
  let q0 = blk + 2u + 4u * QW * i;
  var s = 0.0;
  for (var j = 0u; j < QW; j++) {
    s += dot(b2f(lw1(q0 + 4u * j) ^ 0x80808080u, 128.0), xs[j]);
  }
  return h16(blk) * s;
}
