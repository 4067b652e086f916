// Q4_1: 32 elements in 20 bytes: d f16, m f16, qs[16]; x[i] = d * nib + m.
#include "common/dequant.wgsl"
const QK: u32 = 32u;
const QB: u32 = 20u;

fn dq8(blk: u32, c: u32) -> V8 {
  let dm = unpack2x16float(ld32(blk));
  let q = blk + 4u + (c & 1u) * 8u;
  let n = nib8(ld32(q), ld32(q + 4u), (c >> 1u) * 4u);
  return V8(dm.x * vec4<f32>(n[0]) + dm.y, dm.x * vec4<f32>(n[1]) + dm.y);
}
