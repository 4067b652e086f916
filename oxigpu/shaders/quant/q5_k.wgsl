// Q5_K: 256 elements in 176 bytes: d f16, dmin f16, scales[12], qh[32], qs[128].
// Like Q4_K, plus a 5th bit: element l of sub-block s has (qh[l] >> s) & 1 as bit 4.
#include "common/dequant.wgsl"
const QK: u32 = 256u;
const QB: u32 = 176u;

fn dq8(blk: u32, c: u32) -> V8 {
  let s = c >> 2u;
  let l0 = (c & 3u) * 8u;
  let dm = unpack2x16float(ld32(blk));
  let sm = scale_min_k4(blk + 4u, s);
  let q = blk + 48u + 32u * (s >> 1u) + l0;
  let n = nib8(ld32(q), ld32(q + 4u), (s & 1u) * 4u);
  let hb = bit8(ld32(blk + 16u + l0), ld32(blk + 20u + l0), s);
  let d = dm.x * sm.x;
  let m = dm.y * sm.y;
  return V8(d * vec4<f32>(n[0] | (hb[0] << vec4<u32>(4u))) - m,
            d * vec4<f32>(n[1] | (hb[1] << vec4<u32>(4u))) - m);
}
