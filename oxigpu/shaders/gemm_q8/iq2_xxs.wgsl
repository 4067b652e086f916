// IQ2_XXS for gemm_q8.wgsl (quant/iq2_xxs.wgsl's layout): sub-block j's four grid entries (8 int8 each)
// with their signs applied (common/iq_grid.wgsl neg4); scale d (0.5 + s) / 4.
#include "quant/iq2_xxs.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

// Grid entry l of the sub-block (index byte l of g, sign index l of aux) as two words of int8.
fn iq2_xxs_entry(g: u32, aux: u32, l: u32) -> vec2<u32> {
  let e = (g >> (8u * l)) & 0xFFu;
  let s = ksign((aux >> (7u * l)) & 127u);
  return vec2<u32>(neg4(QG[2u * e], s & 0xFu), neg4(QG[2u * e + 1u], s >> 4u));
}

fn q32(blk: u32, j: u32) -> Q32 {
  let o = blk + 2u + 8u * j;
  let g = ld32(o);
  let aux = ld32(o + 4u);
  let e0 = iq2_xxs_entry(g, aux, 0u); let e1 = iq2_xxs_entry(g, aux, 1u);
  let e2 = iq2_xxs_entry(g, aux, 2u); let e3 = iq2_xxs_entry(g, aux, 3u);
  let db = f16at(blk) * (0.5 + f32(aux >> 28u)) * 0.25;
  return Q32(vec4<u32>(e0, e1), vec4<u32>(e2, e3), db, 0.0);
}
