// IQ2_S: 256 elements in 82 bytes: d f16, qs[32] (low 8 bits of a 10-bit iq2s_grid index per 8
// elements), signs[32] (a sign byte per 8), qh[8] (the indices' high 2 bits, 4 per byte), scales[8]
// (a 4-bit scale s per 16 elements); x = d (0.5 + s) / 4 * grid * sign.
#include "common/dequant.wgsl"
#include "common/iq_grid.wgsl"
const QK: u32 = 256u;
const QB: u32 = 82u;

fn dq8(blk: u32, c: u32) -> V8 {
  let ib = c >> 2u;
  let l = c & 3u;
  let idx = ld8(blk + 2u + c) | ((ld8(blk + 66u + ib) << (8u - 2u * l)) & 0x300u);
  let s = (ld8(blk + 74u + ib) >> (4u * (l >> 1u))) & 0xFu;
  let db = f16at(blk) * (0.5 + f32(s)) * 0.25;
  let g = grid8(idx, ld8(blk + 34u + c));
  return V8(db * g[0], db * g[1]);
}
