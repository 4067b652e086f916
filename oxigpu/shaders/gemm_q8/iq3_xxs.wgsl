// IQ3_XXS for gemm_q8.wgsl (quant/iq3_xxs.wgsl's layout): sub-block j's eight 4-byte grid entries, entry
// e signed by nibble e % 2 of the sign byte e / 2; scale d (0.5 + s) / 2.
#include "quant/iq3_xxs.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

// Entries 2 l, 2 l + 1 (index bytes of q, a u16) signed by sign index l of aux.
fn iq3_xxs_pair(q: u32, aux: u32, l: u32) -> vec2<u32> {
  let s = ksign((aux >> (7u * l)) & 127u);
  return vec2<u32>(neg4(QG[q & 0xFFu], s & 0xFu), neg4(QG[(q >> 8u) & 0xFFu], s >> 4u));
}

fn q32(blk: u32, j: u32) -> Q32 {
  let q = blk + 2u + 8u * j;
  let g0 = ld32(q);
  let g1 = ld32(q + 4u);
  let aux = ld32(blk + 66u + 4u * j);
  let db = f16at(blk) * (0.5 + f32(aux >> 28u)) * 0.5;
  return Q32(vec4<u32>(iq3_xxs_pair(g0, aux, 0u), iq3_xxs_pair(g0 >> 16u, aux, 1u)),
             vec4<u32>(iq3_xxs_pair(g1, aux, 2u), iq3_xxs_pair(g1 >> 16u, aux, 3u)), db, 0.0);
}
