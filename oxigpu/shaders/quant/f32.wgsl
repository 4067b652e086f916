// F32 rows, seen as virtual blocks of 8 elements (32 bytes, always word-aligned).
#include "common/dequant.wgsl"
const QK: u32 = 8u;
const QB: u32 = 32u;

fn dq8(blk: u32, c: u32) -> V8 {
  let w = blk >> 2u;
  return V8(bitcast<vec4<f32>>(vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u])),
            bitcast<vec4<f32>>(vec4<u32>(W[w + 4u], W[w + 5u], W[w + 6u], W[w + 7u])));
}
