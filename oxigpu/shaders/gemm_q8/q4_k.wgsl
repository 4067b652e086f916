// Q4_K for gemm_q8.wgsl (quant/q4_k.wgsl's layout): sub-block j = nibbles (j odd: high) of
// qs[32 (j / 2) ..][0..32], scale d * sc[j], min dmin * m[j] (x = scale * q - min).
#include "quant/q4_k.wgsl"
const FK: u32 = 32u;
const HM: u32 = 1u;

fn q32(blk: u32, j: u32) -> Q32 {
  let dm = unpack2x16float(W[blk >> 2u]);
  let sm = scale_min_k4(blk + 4u, j);
  let q = blk + 16u + 32u * (j >> 1u);
  let sh = vec4<u32>(4u * (j & 1u));
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32((lw16a(q) >> sh) & mask, (lw16a(q + 16u) >> sh) & mask, dm.x * sm.x, dm.y * sm.y);
}
