// BF16 rows, seen as virtual blocks of 8 elements (16 bytes, always word-aligned).
// A bf16 is the high half of an f32.
#include "common/dequant.wgsl"
const QK: u32 = 8u;
const QB: u32 = 16u;

fn bf16x2(w: u32) -> vec2<f32> {
  return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xFFFF0000u));
}

fn dq8(blk: u32, c: u32) -> V8 {
  let w = blk >> 2u;
  return V8(vec4<f32>(bf16x2(W[w]), bf16x2(W[w + 1u])), vec4<f32>(bf16x2(W[w + 2u]), bf16x2(W[w + 3u])));
}
