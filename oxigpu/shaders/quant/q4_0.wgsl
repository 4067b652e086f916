// Q4_0: 32 elements in 18 bytes: d f16, qs[16]; x[i] = d * (nib - 8), low nibbles are elements 0..15. On the
// GPU in pairs, the body (qs) 4-aligned: common/dequant.wgsl pair_body.
#include "common/dequant.wgsl"
const QK: u32 = 32u;
const QB: u32 = 18u;

fn dq8(blk: u32, c: u32) -> V8 {
  let d = pair_d(blk, QB);
  let q = (pair_body(blk) >> 2u) + 2u * (c & 1u);
  let n = nib8(W[q], W[q + 1u], (c >> 1u) * 4u);
  return V8(d * (vec4<f32>(n[0]) - 8.0), d * (vec4<f32>(n[1]) - 8.0));
}
