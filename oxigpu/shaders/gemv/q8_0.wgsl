// Q8_0 pieces: QW consecutive words of qs (4 QW elements); PPB32 (a define: 1, 2 or 4) pieces per block.
// Bytes are biased by 128 (xor 0x80) so they convert as unsigned values.
const PPB: u32 = {{PPB32}}u;
const QW: u32 = 8u / PPB;
const PX: u32 = QW;

fn gx(i: u32, j: u32) -> u32 { return 4u * (QW * i + j); }

fn q8dot(b: u32, x: vec4<f32>) -> f32 { return dot(b2f(lw1(b) ^ 0x80808080u, 128.0), x); }

fn gdot(blk: u32, i: u32, xs: XS) -> f32 {
  let q = blk + 2u + 4u * QW * i;
  var s = q8dot(q, xs[0]);
  if (QW > 1u) { s += q8dot(q + 4u, xs[1]); }
  if (QW > 2u) { s += q8dot(q + 8u, xs[2]) + q8dot(q + 12u, xs[3]); }
  if (QW > 4u) { s += q8dot(q + 16u, xs[4]) + q8dot(q + 20u, xs[5]) + q8dot(q + 24u, xs[6]) + q8dot(q + 28u, xs[7]); }
  return h16(blk) * s;
}
