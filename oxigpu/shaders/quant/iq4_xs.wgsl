// IQ4_XS: 256 elements in 136 bytes: d f16, scales_h u16, scales_l[4], qs[128]. Sub-block s (32
// elements): 6-bit scale ls = nibble s of scales_l | 2 bits s of scales_h << 4, dl = d * (ls - 32);
// qs[16 s ..][0..16] low nibbles are its elements 0..15, high ones 16..31; x = dl * kvalues[nib]
// (common/iq4.wgsl).
#include "common/dequant.wgsl"
#include "common/iq4.wgsl"
const QK: u32 = 256u;
const QB: u32 = 136u;

fn iq4_xs_scale(blk: u32, s: u32) -> f32 {
  let lo = (ld8(blk + 4u + (s >> 1u)) >> (4u * (s & 1u))) & 0xFu;
  let hi = (ld16(blk + 2u) >> (2u * s)) & 3u;
  return f16at(blk) * (f32(lo | (hi << 4u)) - 32.0);
}

fn dq8(blk: u32, c: u32) -> V8 {
  let s = c >> 2u;
  let dl = iq4_xs_scale(blk, s);
  let q = blk + 8u + 16u * s + (c & 1u) * 8u;
  let a = iq4w(ld32(q));
  let b = iq4w(ld32(q + 4u));
  let hi = (c & 2u) != 0u;
  return V8(dl * sbytes4(select(a.x, a.y, hi)), dl * sbytes4(select(b.x, b.y, hi)));
}
