// Q2_K: 256 elements in 84 bytes: scales[16] (low nibble scale, high nibble min), qs[64], d f16, dmin f16.
// Element e: half h = e/128, shift j = (e%128)/32, l = e%32: q = (qs[32h + l] >> 2j) & 3,
// sub-scale byte 8h + 2j + l/16; x = d * (sc & 15) * q - dmin * (sc >> 4).
#include "common/dequant.wgsl"
const QK: u32 = 256u;
const QB: u32 = 84u;

fn dq8(blk: u32, c: u32) -> V8 {
  let h = c >> 4u;
  let j = (c >> 2u) & 3u;
  let l0 = (c & 3u) * 8u;
  let dm = unpack2x16float(ld32(blk + 80u));
  let sc = ld8(blk + 8u * h + 2u * j + (l0 >> 4u));
  let q = blk + 16u + 32u * h + l0;
  let sh = vec4<u32>(2u * j);
  let d = dm.x * f32(sc & 0xFu);
  let m = dm.y * f32(sc >> 4u);
  return V8(d * vec4<f32>((bytes4(ld32(q)) >> sh) & vec4<u32>(3u)) - m,
            d * vec4<f32>((bytes4(ld32(q + 4u)) >> sh) & vec4<u32>(3u)) - m);
}
