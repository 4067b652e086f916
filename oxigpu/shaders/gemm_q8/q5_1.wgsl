// Q5_1 for gemm_q8.wgsl: as Q4_1 with bit e of the qh word as bit 4 of element e (0..31 as int8); scale d
// and min -m. Blocks of 24 bytes: word-aligned.
#include "quant/q5_1.wgsl"
const FK: u32 = 32u;
const HM: u32 = 1u;

// Bits 4 e' .. 4 e' + 3 of h as bit 4 of the bytes of word e' (e' = 0..3).
fn q5_1_high(h: u32) -> vec4<u32> {
  return vec4<u32>(spread4(h & 0xFu), spread4((h >> 4u) & 0xFu), spread4((h >> 8u) & 0xFu),
                   spread4(h >> 12u)) << vec4<u32>(4u);
}

fn q32(blk: u32, j: u32) -> Q32 {
  let dm = unpack2x16float(W[blk >> 2u]);
  let qh = W[(blk >> 2u) + 1u];
  let q = lw16a(blk + 8u);
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32((q & mask) | q5_1_high(qh & 0xFFFFu), ((q >> vec4<u32>(4u)) & mask) | q5_1_high(qh >> 16u),
             dm.x, -dm.y);
}
