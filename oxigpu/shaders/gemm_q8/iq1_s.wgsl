// IQ1_S for gemm_q8.wgsl (quant/iq1_s.wgsl's layout): x = dl (g +- 1/8) = dl / 8 * (8 g +- 1), so
// sub-block j's grid values g (-1, 0, 1) become the int8 8 g + 1 or 8 g - 1 (the delta's sign) with
// scale d (2 s + 1) / 8: the same products.
#include "quant/iq1_s.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

fn iq1_entry(g: u32, off: u32) -> vec2<u32> {
  return iq1_q8(vec2<u32>(QG[2u * g], QG[2u * g + 1u]), off);
}

fn q32(blk: u32, j: u32) -> Q32 {
  let qh = ld16(blk + 34u + 2u * j);
  let qs = ld32(blk + 2u + 4u * j);
  let off = select(7u, 9u, (qh & 0x8000u) != 0u);
  let dl = f16at(blk) * f32(2u * ((qh >> 12u) & 7u) + 1u);
  let g0 = (qs & 0xFFu) | ((qh & 7u) << 8u);
  let g1 = ((qs >> 8u) & 0xFFu) | (((qh >> 3u) & 7u) << 8u);
  let g2 = ((qs >> 16u) & 0xFFu) | (((qh >> 6u) & 7u) << 8u);
  let g3 = (qs >> 24u) | (((qh >> 9u) & 7u) << 8u);
  return Q32(vec4<u32>(iq1_entry(g0, off), iq1_entry(g1, off)), vec4<u32>(iq1_entry(g2, off), iq1_entry(g3, off)),
             dl * 0.125, 0.0);
}
