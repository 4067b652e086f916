// Q8_0 for gemm_q8.wgsl: the block's 32 int8 and its scale d.
#include "quant/q8_0.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

fn q32(blk: u32, j: u32) -> Q32 {
  return Q32(lw16(blk + 2u), lw16(blk + 18u), f16at(blk), 0.0);
}
