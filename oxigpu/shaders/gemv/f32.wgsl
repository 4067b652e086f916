// F32 pieces: 4 elements, one 16-byte load (two pieces per 8-element virtual block).
const f32_QK: u32 = 8u;
const f32_QB: u32 = 32u;
const f32_PPB: u32 = 2u;
const f32_PX: u32 = 1u;

fn f32_gx(i: u32, j: u32) -> u32 { return 4u * i; }

fn f32_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  return dot(bitcast<vec4<f32>>(wq(s, (blk >> 4u) + i)), xs[0]);
}
