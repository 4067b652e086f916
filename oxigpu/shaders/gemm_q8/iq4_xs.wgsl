// IQ4_XS for gemm_q8.wgsl (quant/iq4_xs.wgsl's layout): sub-block j's codebook values as int8, low
// nibbles of qs[16 j ..] (elements 0..15) then high ones; scale d * (ls - 32). Blocks of 136 bytes:
// word-aligned.
#include "quant/iq4_xs.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

fn q32(blk: u32, j: u32) -> Q32 {
  let q = lw16a(blk + 8u + 16u * j);
  let a = iq4w(q.x); let b = iq4w(q.y); let c = iq4w(q.z); let e = iq4w(q.w);
  return Q32(vec4<u32>(a.x, b.x, c.x, e.x), vec4<u32>(a.y, b.y, c.y, e.y), iq4_xs_scale(blk, j), 0.0);
}
