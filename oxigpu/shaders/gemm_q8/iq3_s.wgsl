// IQ3_S for gemm_q8.wgsl (quant/iq3_s.wgsl's layout): sub-block j's eight 4-byte grid entries (9-bit
// indices: bit e of qh[j] on top of qs[8 j + e]), entry e signed by nibble e % 2 of sign byte e / 2;
// scale d (1 + 2 s).
#include "quant/iq3_s.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

// Entry e (index byte e % 4 of q) signed by the 4 bits s4.
fn iq3_s_entry(q: u32, qh: u32, e: u32, s4: u32) -> u32 {
  return neg4(QG[((q >> (8u * (e & 3u))) & 0xFFu) | (((qh >> e) & 1u) << 8u)], s4);
}

fn q32(blk: u32, j: u32) -> Q32 {
  let g0 = ld32(blk + 2u + 8u * j);
  let g1 = ld32(blk + 6u + 8u * j);
  let qh = ld8(blk + 66u + j);
  let sg = ld32(blk + 74u + 4u * j);
  let s = (ld8(blk + 106u + (j >> 1u)) >> (4u * (j & 1u))) & 0xFu;
  return Q32(vec4<u32>(iq3_s_entry(g0, qh, 0u, sg & 0xFu), iq3_s_entry(g0, qh, 1u, (sg >> 4u) & 0xFu),
                       iq3_s_entry(g0, qh, 2u, (sg >> 8u) & 0xFu), iq3_s_entry(g0, qh, 3u, (sg >> 12u) & 0xFu)),
             vec4<u32>(iq3_s_entry(g1, qh, 4u, (sg >> 16u) & 0xFu), iq3_s_entry(g1, qh, 5u, (sg >> 20u) & 0xFu),
                       iq3_s_entry(g1, qh, 6u, (sg >> 24u) & 0xFu), iq3_s_entry(g1, qh, 7u, sg >> 28u)),
             f16at(blk) * f32(1u + 2u * s), 0.0);
}
