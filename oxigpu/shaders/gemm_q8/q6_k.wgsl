// Q6_K for gemm_q8.wgsl (quant/q6_k.wgsl's layout): sub-block j = quarter t = j % 4 of half n = j / 4:
// low bits from ql[64 n + 32 (t % 2) ..] (nibble t / 2), high bits from qh[32 n ..] >> 2 t, minus 32;
// int8 scales per 16 elements (FK 16): d * scales[8 n + 2 t], d * scales[8 n + 2 t + 1].
#include "quant/q6_k.wgsl"
const FK: u32 = 16u;
const HM: u32 = 0u;

fn q6_k_half(ql: vec4<u32>, qh: vec4<u32>, t: u32) -> vec4<u32> {
  let v = ((ql >> vec4<u32>(4u * (t >> 1u))) & vec4<u32>(0x0F0F0F0Fu)) |
          (((qh >> vec4<u32>(2u * t)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
  return s8(v, 32u);
}

fn q32(blk: u32, j: u32) -> Q32 {
  let n = j >> 2u;
  let t = j & 3u;
  let ql = blk + 64u * n + 32u * (t & 1u);
  let qh = blk + 128u + 32u * n;
  let d = f16at(blk + 208u);
  let sc = bitcast<i32>(ld16(blk + 192u + 8u * n + 2u * t));
  return Q32(q6_k_half(lw16(ql), lw16(qh), t), q6_k_half(lw16(ql + 16u), lw16(qh + 16u), t),
             d * f32((sc << 24u) >> 24u), d * f32((sc << 16u) >> 24u));
}
