// IQ2_XXS: 256 elements in 66 bytes: d f16, then per 32 elements 8 bytes: 4 grid indices (one per 8
// elements, into iq2xxs_grid) and a u32 of four 7-bit sign indices and a 4-bit scale s (bits 28..31);
// x = d (0.5 + s) / 4 * grid * sign.
#include "common/dequant.wgsl"
#include "common/iq_grid.wgsl"
const QK: u32 = 256u;
const QB: u32 = 66u;

fn dq8(blk: u32, c: u32) -> V8 {
  let o = blk + 2u + 8u * (c >> 2u);
  let l = c & 3u;
  let aux = ld32(o + 4u);
  let db = f16at(blk) * (0.5 + f32(aux >> 28u)) * 0.25;
  let g = grid8((ld32(o) >> (8u * l)) & 0xFFu, ksign((aux >> (7u * l)) & 127u));
  return V8(db * g[0], db * g[1]);
}
