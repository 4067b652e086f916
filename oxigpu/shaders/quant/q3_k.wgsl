// Q3_K: 256 elements in 110 bytes: hmask[32], qs[64], scales[12] (16 packed 6-bit), d f16.
// Element e: half h = e/128, shift j = (e%128)/32, l = e%32: q2 = (qs[32h + l] >> 2j) & 3,
// high bit (hmask[l] >> (4h + j)) & 1 (clear means -4), sub-scale is = 8h + 2j + l/16 (minus 32). On the GPU
// in pairs, the body (hmask, qs, scales) 4-aligned: common/dequant.wgsl pair_body.
#include "common/dequant.wgsl"
const QK: u32 = 256u;
const QB: u32 = 110u;

fn q3_scale(sb: u32, i: u32) -> f32 {
  let lo = (ld8(sb + (i & 7u)) >> (4u * (i >> 3u))) & 0xFu;
  let hi = (ld8(sb + 8u + (i & 3u)) >> (2u * (i >> 2u))) & 3u;
  return f32(lo | (hi << 4u)) - 32.0;
}

fn dq8(blk: u32, c: u32) -> V8 {
  let h = c >> 4u;
  let j = (c >> 2u) & 3u;
  let l0 = (c & 3u) * 8u;
  let b = pair_body(blk);
  let d = pair_d(blk, QB) * q3_scale(b + 96u, 8u * h + 2u * j + (l0 >> 4u));
  let q = (b + 32u + 32u * h + l0) >> 2u;
  let sh = vec4<u32>(2u * j);
  let hm = bit8(W[(b + l0) >> 2u], W[((b + l0) >> 2u) + 1u], 4u * h + j);
  let q0 = vec4<f32>((bytes4(W[q]) >> sh) & vec4<u32>(3u)) - 4.0 * vec4<f32>(1u - hm[0]);
  let q1 = vec4<f32>((bytes4(W[q + 1u]) >> sh) & vec4<u32>(3u)) - 4.0 * vec4<f32>(1u - hm[1]);
  return V8(d * q0, d * q1);
}
