// Q8_0 for gemm_q8.wgsl: the block's 32 int8 and its scale d.
#include "quant/q8_0.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

fn q32(blk: u32, j: u32) -> Q32 {
  let b = pair_body(blk);
  return Q32(lw16a(b), lw16a(b + 16u), pair_d(blk, QB), 0.0);
}
