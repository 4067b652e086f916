// IQ3_XXS: 256 elements in 98 bytes: d f16, qs[64] (an iq3xxs_grid index per 4 elements: 4-byte
// entries), then per 32 elements a u32 of four 7-bit sign indices (one per 8) and a 4-bit scale s
// (bits 28..31); x = d (0.5 + s) / 2 * grid * sign.
#include "common/dequant.wgsl"
#include "common/iq_grid.wgsl"
const QK: u32 = 256u;
const QB: u32 = 98u;

fn dq8(blk: u32, c: u32) -> V8 {
  let ib = c >> 2u;
  let aux = ld32(blk + 66u + 4u * ib);
  let db = f16at(blk) * (0.5 + f32(aux >> 28u)) * 0.5;
  let signs = ksign((aux >> (7u * (c & 3u))) & 127u);
  let q = ld16(blk + 2u + 2u * c);
  return V8(db * (sbytes4(QG[q & 0xFFu]) * sgn4(signs)), db * (sbytes4(QG[q >> 8u]) * sgn4(signs >> 4u)));
}
