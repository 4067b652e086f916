// IQ4_NL: 32 elements in 18 bytes: d f16, qs[16]; x[i] = d * kvalues[nib] (ggml's non-linear codebook,
// common/iq4.wgsl), low nibbles are elements 0..15. On the GPU in pairs, qs 4-aligned: common/dequant.wgsl
// pair_body.
#include "common/dequant.wgsl"
#include "common/iq4.wgsl"
const QK: u32 = 32u;
const QB: u32 = 18u;

fn dq8(blk: u32, c: u32) -> V8 {
  let d = pair_d(blk, QB);
  let q = (pair_body(blk) >> 2u) + (c & 1u) * 2u;
  let a = iq4w(W[q]);
  let b = iq4w(W[q + 1u]);
  let hi = c >= 2u;
  return V8(d * sbytes4(select(a.x, a.y, hi)), d * sbytes4(select(b.x, b.y, hi)));
}
