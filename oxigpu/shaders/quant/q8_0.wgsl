// Q8_0: 32 elements in 34 bytes: d f16, qs[32] int8; x[i] = d * qs[i]. Blocks are only 2-byte aligned.
#include "common/dequant.wgsl"
const QK: u32 = 32u;
const QB: u32 = 34u;

fn dq8(blk: u32, c: u32) -> V8 {
  let d = f16at(blk);
  let q = blk + 2u + c * 8u;
  return V8(d * sbytes4(ld32(q)), d * sbytes4(ld32(q + 4u)));
}
