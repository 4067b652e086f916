// Q4_1 for gemm_q8.wgsl: low nibbles of qs are elements 0..15, high ones 16..31 (0..15 as int8); scale d
// and min -m (x = d q + m). Blocks of 20 bytes: word-aligned.
#include "quant/q4_1.wgsl"
const FK: u32 = 32u;
const HM: u32 = 1u;

fn q32(blk: u32, j: u32) -> Q32 {
  let dm = unpack2x16float(W[blk >> 2u]);
  let q = lw16a(blk + 4u);
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32(q & mask, (q >> vec4<u32>(4u)) & mask, dm.x, -dm.y);
}
