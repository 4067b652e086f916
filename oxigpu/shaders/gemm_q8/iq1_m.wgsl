// IQ1_M for gemm_q8.wgsl (quant/iq1_m.wgsl's layout): as IQ1_S (int8 8 g +- 1, scales / 8), with the
// delta's sign per 8 elements and scales per 16 (FK 16): d (2 s + 1) / 8 for the sub-block's two halves.
#include "quant/iq1_m.wgsl"
const FK: u32 = 16u;
const HM: u32 = 0u;

// Entry l of the sub-block: index byte l of qs with nibble l of h (3 high bits, bit 3 the delta's sign).
fn iq1_m_entry(qs: u32, h: u32, l: u32) -> vec2<u32> {
  let n = (h >> (4u * l)) & 0xFu;
  let g = ((qs >> (8u * l)) & 0xFFu) | ((n & 7u) << 8u);
  return iq1_q8(vec2<u32>(QG[2u * g], QG[2u * g + 1u]), select(7u, 9u, (n & 8u) != 0u));
}

fn q32(blk: u32, j: u32) -> Q32 {
  let qs = ld32(blk + 4u * j);
  let h = ld16(blk + 32u + 2u * j);
  let sc = ld16(blk + 48u + 2u * (j >> 1u)) >> (6u * (j & 1u));
  let d = iq1_m_d(blk) * 0.125;
  return Q32(vec4<u32>(iq1_m_entry(qs, h, 0u), iq1_m_entry(qs, h, 1u)),
             vec4<u32>(iq1_m_entry(qs, h, 2u), iq1_m_entry(qs, h, 3u)),
             d * f32(2u * (sc & 7u) + 1u), d * f32(2u * ((sc >> 3u) & 7u) + 1u));
}
