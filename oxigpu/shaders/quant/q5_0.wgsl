// Q5_0: 32 elements in 22 bytes: d f16, qh u32 (bit i = 5th bit of element i), qs[16];
// x[i] = d * (q5 - 16). On the GPU in pairs, the body (qh, qs) 4-aligned: common/dequant.wgsl pair_body.
#include "common/dequant.wgsl"
const QK: u32 = 32u;
const QB: u32 = 22u;

fn dq8(blk: u32, c: u32) -> V8 {
  let d = pair_d(blk, QB);
  let v = q5_chunk(pair_body(blk), pair_body(blk) + 4u, c);
  return V8(d * (v[0] - 16.0), d * (v[1] - 16.0));
}
