// F16 rows, seen as virtual blocks of 8 elements (16 bytes, always word-aligned).
#include "common/dequant.wgsl"
const QK: u32 = 8u;
const QB: u32 = 16u;

fn dq8(blk: u32, c: u32) -> V8 {
  let w = blk >> 2u;
  return V8(vec4<f32>(unpack2x16float(W[w]), unpack2x16float(W[w + 1u])),
            vec4<f32>(unpack2x16float(W[w + 2u]), unpack2x16float(W[w + 3u])));
}
