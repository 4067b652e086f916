// Q6_K: 256 elements in 210 bytes: ql[128], qh[64], scales[16] int8, d f16.
// Element e: half n = e/128, quarter t = (e%128)/32, l = e%32:
// q = ((ql[64n + 32(t%2) + l] >> 4(t/2)) & 15) | (((qh[32n + l] >> 2t) & 3) << 4);
// x = d * scales[8n + 2t + l/16] * (q - 32).
// On the GPU blocks sit in pairs (common/dequant.wgsl pair_body, pair_d): the 208 bytes of ql, qh, scales
// 4-aligned, the d apart.
#include "common/dequant.wgsl"
const QK: u32 = 256u;
const QB: u32 = 210u;

fn dq8(blk0: u32, c: u32) -> V8 {
  let blk = pair_body(blk0);
  let n = c >> 4u;
  let t = (c >> 2u) & 3u;
  let l0 = (c & 3u) * 8u;
  let ql = blk + 64u * n + 32u * (t & 1u) + l0;
  let qh = blk + 128u + 32u * n + l0;
  let lo = nib8(ld32(ql), ld32(ql + 4u), (t >> 1u) * 4u);
  let sh = vec4<u32>(2u * t);
  let h0 = ((bytes4(ld32(qh)) >> sh) & vec4<u32>(3u)) << vec4<u32>(4u);
  let h1 = ((bytes4(ld32(qh + 4u)) >> sh) & vec4<u32>(3u)) << vec4<u32>(4u);
  let sc = f32((bitcast<i32>(ld8(blk + 192u + 8u * n + 2u * t + (l0 >> 4u))) << 24u) >> 24u);
  let d = pair_d(blk0, QB) * sc;
  return V8(d * (vec4<f32>(lo[0] | h0) - 32.0), d * (vec4<f32>(lo[1] | h1) - 32.0));
}

// The integer-dot and matrix-unit loaders' 32-block j of a block (quarter t = j % 4 of half n = j / 4):
// the byte offsets of its low and high bits, and its two int8 scales (16 elements each).
struct Q6Sub { ql: u32, qh: u32, t: u32, sc: vec2<f32> }

fn q6_sub(blk0: u32, j: u32) -> Q6Sub {
  let blk = pair_body(blk0);
  let n = j >> 2u;
  let t = j & 3u;
  let sc = bitcast<i32>(ld16(blk + 192u + 8u * n + 2u * t));
  return Q6Sub(blk + 64u * n + 32u * (t & 1u), blk + 128u + 32u * n, t,
               vec2<f32>(f32((sc << 24u) >> 24u), f32((sc << 16u) >> 24u)));
}

// The 6-bit values (0..63, a byte each) of 16 bytes of low bits ql and high bits qh of quarter t.
fn q6_bytes(ql: vec4<u32>, qh: vec4<u32>, t: u32) -> vec4<u32> {
  return ((ql >> vec4<u32>(4u * (t >> 1u))) & vec4<u32>(0x0F0F0F0Fu)) |
         (((qh >> vec4<u32>(2u * t)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
}
