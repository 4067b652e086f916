// Q5_K for gemm_q8.wgsl (quant/q5_k.wgsl's layout): sub-block j = nibbles (j odd: high) of
// qs[32 (j / 2) ..][0..32] with bit j of qh[l] as bit 4 of element l (0..31 as int8), scale d * sc[j],
// min dmin * m[j]. Blocks of 176 bytes: 16-aligned.
#include "quant/q5_k.wgsl"
const FK: u32 = 32u;
const HM: u32 = 1u;

fn q32(blk: u32, j: u32) -> Q32 {
  let dm = unpack2x16float(W[blk >> 2u]);
  let sm = scale_min_k4(blk + 4u, j);
  let q = blk + 48u + 32u * (j >> 1u);
  let sh = vec4<u32>(4u * (j & 1u));
  let mask = vec4<u32>(0x0F0F0F0Fu);
  let hb = vec4<u32>(j);
  let h0 = ((lw16a(blk + 16u) >> hb) & vec4<u32>(0x01010101u)) << vec4<u32>(4u);
  let h1 = ((lw16a(blk + 32u) >> hb) & vec4<u32>(0x01010101u)) << vec4<u32>(4u);
  return Q32(((lw16a(q) >> sh) & mask) | h0, ((lw16a(q + 16u) >> sh) & mask) | h1, dm.x * sm.x, dm.y * sm.y);
}
