// TQ2_0 for gemm_q8.wgsl (quant/tq2_0.wgsl's layout): sub-block j = shift t = j % 4 of half h = j / 4:
// ((qs[32 h + l] >> 2 t) & 3) - 1 as int8; scale d.
#include "quant/tq2_0.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

fn q32(blk: u32, j: u32) -> Q32 {
  let q = blk + 32u * (j >> 2u);
  let sh = vec4<u32>(2u * (j & 3u));
  let m = vec4<u32>(0x03030303u);
  return Q32(s8((lw16(q) >> sh) & m, 1u), s8((lw16(q + 16u) >> sh) & m, 1u), f16at(blk + 64u), 0.0);
}
