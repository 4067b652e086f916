// Q4_K: 256 elements in 144 bytes: d f16, dmin f16, scales[12] (8 packed 6-bit scale/min pairs), qs[128].
// Sub-block s (32 elements) = nibbles (s % 2 ? high : low) of qs[32 (s/2) ..][0..32];
// x = d * sc[s] * q - dmin * m[s].
#include "common/dequant.wgsl"
const QK: u32 = 256u;
const QB: u32 = 144u;

fn dq8(blk: u32, c: u32) -> V8 {
  let s = c >> 2u;
  let dm = unpack2x16float(ld32(blk));
  let sm = scale_min_k4(blk + 4u, s);
  let q = blk + 16u + 32u * (s >> 1u) + (c & 3u) * 8u;
  let n = nib8(ld32(q), ld32(q + 4u), (s & 1u) * 4u);
  let d = dm.x * sm.x;
  let m = dm.y * sm.y;
  return V8(d * vec4<f32>(n[0]) - m, d * vec4<f32>(n[1]) - m);
}
