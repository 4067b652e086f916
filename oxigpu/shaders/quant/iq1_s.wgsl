// IQ1_S: 256 elements in 50 bytes: d f16, qs[32] (low 8 bits of an 11-bit iq1s_grid index per 8
// elements: values -1, 0, 1), qh u16[8] (per 32 elements: the indices' high 3 bits at 3 l, a 3-bit scale
// s at bit 12, the delta's sign at bit 15); x = d (2 s + 1) * (grid +- 1/8).
#include "common/dequant.wgsl"
#include "common/iq_grid.wgsl"
const QK: u32 = 256u;
const QB: u32 = 50u;

fn dq8(blk: u32, c: u32) -> V8 {
  let qh = ld16(blk + 34u + 2u * (c >> 2u));
  let dl = f16at(blk) * f32(2u * ((qh >> 12u) & 7u) + 1u);
  let delta = select(0.125, -0.125, (qh & 0x8000u) != 0u);
  let g = ld8(blk + 2u + c) | (((qh >> (3u * (c & 3u))) & 7u) << 8u);
  return V8(dl * (sbytes4(QG[2u * g]) + delta), dl * (sbytes4(QG[2u * g + 1u]) + delta));
}
