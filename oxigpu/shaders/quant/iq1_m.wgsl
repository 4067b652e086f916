// IQ1_M: 256 elements in 56 bytes: qs[32] (low 8 bits of an 11-bit iq1s_grid index per 8 elements),
// qh[16] (per 8 elements a nibble: the index's high 3 bits and the delta's sign at bit 3), scales u16[4]
// (a 3-bit scale s per 16 elements; the f16 d in their top nibbles, d's low bits in word 0);
// x = d (2 s + 1) * (grid +- 1/8).
#include "common/dequant.wgsl"
#include "common/iq_grid.wgsl"
const QK: u32 = 256u;
const QB: u32 = 56u;

fn iq1_m_d(blk: u32) -> f32 {
  let a = ld32(blk + 48u);
  let b = ld32(blk + 52u);
  let bits = ((a >> 12u) & 0xFu) | ((a >> 24u) & 0xF0u) | ((b >> 4u) & 0xF00u) | ((b >> 16u) & 0xF000u);
  return unpack2x16float(bits).x;
}

fn dq8(blk: u32, c: u32) -> V8 {
  let ib = c >> 2u;
  let sc = ld16(blk + 48u + 2u * (ib >> 1u));
  let s = (sc >> (6u * (ib & 1u) + 3u * ((c >> 1u) & 1u))) & 7u;
  let dl = iq1_m_d(blk) * f32(2u * s + 1u);
  let h = (ld8(blk + 32u + (c >> 1u)) >> (4u * (c & 1u))) & 0xFu;
  let delta = select(0.125, -0.125, (h & 8u) != 0u);
  let g = ld8(blk + c) | ((h & 7u) << 8u);
  return V8(dl * (sbytes4(QG[2u * g]) + delta), dl * (sbytes4(QG[2u * g + 1u]) + delta));
}
