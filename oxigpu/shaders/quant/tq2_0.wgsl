// TQ2_0: 256 elements in 66 bytes: qs[64], d f16. Element e: half h = e/128, shift j = (e%128)/32,
// l = e%32: x = d * (((qs[32h + l] >> 2j) & 3) - 1) (ternary weights; the value 3 decodes to 2).
#include "common/dequant.wgsl"
const QK: u32 = 256u;
const QB: u32 = 66u;

fn dq8(blk: u32, c: u32) -> V8 {
  let q = blk + 32u * (c >> 4u) + 8u * (c & 3u);
  let sh = vec4<u32>(2u * ((c >> 2u) & 3u));
  let d = f16at(blk + 64u);
  return V8(d * (vec4<f32>((bytes4(ld32(q)) >> sh) & vec4<u32>(3u)) - 1.0),
            d * (vec4<f32>((bytes4(ld32(q + 4u)) >> sh) & vec4<u32>(3u)) - 1.0));
}
