// F16 pieces: 8 elements, one 16-byte load (the whole 8-element virtual block).
const PPB: u32 = 1u;
const PX: u32 = 2u;

fn gx(i: u32, j: u32) -> u32 { return 4u * j; }

fn gdot(blk: u32, i: u32, xs: XS) -> f32 {
  let w = W4[blk >> 4u];
  return dot(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)), xs[0]) +
         dot(vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)), xs[1]);
}
