// Q4_0 for gemm_q8.wgsl: low nibbles of qs are elements 0..15, high ones 16..31, minus 8; scale d.
#include "quant/q4_0.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

fn q32(blk: u32, j: u32) -> Q32 {
  let q = lw16a(pair_body(blk));
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32(s8(q & mask, 8u), s8((q >> vec4<u32>(4u)) & mask, 8u), pair_d(blk, QB), 0.0);
}
