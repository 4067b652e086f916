// Q8_0: 32 elements in 34 bytes: d f16, qs[32] int8; x[i] = d * qs[i]. On the GPU in pairs, the body (qs)
// 4-aligned: common/dequant.wgsl pair_body.
#include "common/dequant.wgsl"
const QK: u32 = 32u;
const QB: u32 = 34u;

fn dq8(blk: u32, c: u32) -> V8 {
  let d = pair_d(blk, QB);
  let q = (pair_body(blk) >> 2u) + 2u * c;
  return V8(d * sbytes4(W[q]), d * sbytes4(W[q + 1u]));
}
