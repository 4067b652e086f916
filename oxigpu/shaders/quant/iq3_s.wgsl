// IQ3_S: 256 elements in 110 bytes: d f16, qs[64] (low 8 bits of a 9-bit iq3s_grid index per 4
// elements: 4-byte entries), qh[8] (the 9th bits, 8 per 32 elements), signs[32] (a sign byte per 8),
// scales[4] (a 4-bit scale s per 32 elements); x = d (1 + 2 s) * grid * sign.
#include "common/dequant.wgsl"
#include "common/iq_grid.wgsl"
const QK: u32 = 256u;
const QB: u32 = 110u;

fn dq8(blk: u32, c: u32) -> V8 {
  let ib = c >> 2u;
  let l = c & 3u;
  let qh = ld8(blk + 66u + ib);
  let q = ld16(blk + 2u + 2u * c);
  let i0 = (q & 0xFFu) | ((qh << (8u - 2u * l)) & 256u);
  let i1 = (q >> 8u) | ((qh << (7u - 2u * l)) & 256u);
  let s = (ld8(blk + 106u + (ib >> 1u)) >> (4u * (ib & 1u))) & 0xFu;
  let db = f16at(blk) * f32(1u + 2u * s);
  let signs = ld8(blk + 74u + c);
  return V8(db * (sbytes4(QG[i0]) * sgn4(signs)), db * (sbytes4(QG[i1]) * sgn4(signs >> 4u)));
}
