// IQ4_NL: 32 elements in 18 bytes: d f16, qs[16]; x[i] = d * kvalues[nib] (ggml's non-linear codebook),
// low nibbles are elements 0..15.
#include "common/dequant.wgsl"
#include "common/iq4.wgsl"
const QK: u32 = 32u;
const QB: u32 = 18u;

fn dq8(blk: u32, c: u32) -> V8 {
  let d = f16at(blk);
  let q = blk + 2u + (c & 1u) * 8u;
  let n = nib8(ld32(q), ld32(q + 4u), (c >> 1u) * 4u);
  return V8(d * iq4v(n[0]), d * iq4v(n[1]));
}
