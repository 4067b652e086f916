// Q5_0: 32 elements in 22 bytes: d f16, qh u32 (bit i = 5th bit of element i), qs[16];
// x[i] = d * (q5 - 16).
#include "common/dequant.wgsl"
const QK: u32 = 32u;
const QB: u32 = 22u;

fn dq8(blk: u32, c: u32) -> V8 {
  let d = f16at(blk);
  let v = q5_chunk(blk + 2u, blk + 6u, c);
  return V8(d * (v[0] - 16.0), d * (v[1] - 16.0));
}
