// IQ2_XS: 256 elements in 74 bytes: d f16, qs u16[32] (per 8 elements: a 9-bit index into iq2xs_grid,
// a 7-bit sign index), scales[8] (a 4-bit scale s per 16 elements); x = d (0.5 + s) / 4 * grid * sign.
#include "common/dequant.wgsl"
#include "common/iq_grid.wgsl"
const QK: u32 = 256u;
const QB: u32 = 74u;

fn dq8(blk: u32, c: u32) -> V8 {
  let q = ld16(blk + 2u + 2u * c);
  let s = (ld8(blk + 66u + (c >> 2u)) >> (4u * ((c >> 1u) & 1u))) & 0xFu;
  let db = f16at(blk) * (0.5 + f32(s)) * 0.25;
  let g = grid8(q & 511u, ksign(q >> 9u));
  return V8(db * g[0], db * g[1]);
}
