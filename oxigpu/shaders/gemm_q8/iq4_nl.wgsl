// IQ4_NL for gemm_q8.wgsl: the codebook values of the low nibbles (elements 0..15) and high ones
// (16..31) as int8 (common/iq4.wgsl); scale d.
#include "quant/iq4_nl.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

fn q32(blk: u32, j: u32) -> Q32 {
  let q = lw16a(pair_body(blk));
  let a = iq4w(q.x); let b = iq4w(q.y); let c = iq4w(q.z); let e = iq4w(q.w);
  return Q32(vec4<u32>(a.x, b.x, c.x, e.x), vec4<u32>(a.y, b.y, c.y, e.y), pair_d(blk, QB), 0.0);
}
