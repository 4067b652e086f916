// Q5_0 for gemm_q8.wgsl: as Q4_0 with bit e of the qh word as bit 4 of element e, minus 16; scale d.
#include "quant/q5_0.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

// Bits 4 e' .. 4 e' + 3 of h as bit 4 of the bytes of word e' (e' = 0..3).
fn q5_0_high(h: u32) -> vec4<u32> {
  return vec4<u32>(spread4(h & 0xFu), spread4((h >> 4u) & 0xFu), spread4((h >> 8u) & 0xFu),
                   spread4(h >> 12u)) << vec4<u32>(4u);
}

fn q32(blk: u32, j: u32) -> Q32 {
  let qh = W[pair_body(blk) >> 2u];
  let q = lw16a(pair_body(blk) + 4u);
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32(s8((q & mask) | q5_0_high(qh & 0xFFFFu), 16u),
             s8(((q >> vec4<u32>(4u)) & mask) | q5_0_high(qh >> 16u), 16u), pair_d(blk, QB), 0.0);
}
