// Q5_1: 32 elements in 24 bytes: d f16, m f16, qh u32, qs[16]; x[i] = d * q5 + m.
#include "common/dequant.wgsl"
const QK: u32 = 32u;
const QB: u32 = 24u;

fn dq8(blk: u32, c: u32) -> V8 {
  let dm = unpack2x16float(ld32(blk));
  let v = q5_chunk(blk + 4u, blk + 8u, c);
  return V8(dm.x * v[0] + dm.y, dm.x * v[1] + dm.y);
}
