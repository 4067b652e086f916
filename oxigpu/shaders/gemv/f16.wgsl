// F16 pieces: 8 elements, one 16-byte load (the whole 8-element virtual block).
const f16_QK: u32 = 8u;
const f16_QB: u32 = 16u;
const f16_PPB: u32 = 1u;
const f16_PX: u32 = 2u;

fn f16_gx(i: u32, j: u32) -> u32 { return 4u * j; }

fn f16_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let w = wq(s, blk >> 4u);
  return dot(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)), xs[0]) +
         dot(vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)), xs[1]);
}
