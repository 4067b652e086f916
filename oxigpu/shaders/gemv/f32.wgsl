// F32 pieces: 4 elements, one 16-byte load (two pieces per 8-element virtual block).
const PPB: u32 = 2u;
const PX: u32 = 1u;

fn gx(i: u32, j: u32) -> u32 { return 4u * i; }

fn gdot(blk: u32, i: u32, xs: XS) -> f32 {
  return dot(bitcast<vec4<f32>>(W4[(blk >> 4u) + i]), xs[0]);
}
