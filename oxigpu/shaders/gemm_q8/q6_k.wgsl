// Q6_K for gemm_q8.wgsl (quant/q6_k.wgsl's layout): sub-block j = quarter t = j % 4 of half n = j / 4:
// low bits from ql[64 n + 32 (t % 2) ..] (nibble t / 2), high bits from qh[32 n ..] >> 2 t, minus 32;
// int8 scales per 16 elements (FK 16): d * scales[8 n + 2 t], d * scales[8 n + 2 t + 1].
#include "quant/q6_k.wgsl"
const FK: u32 = 16u;
const HM: u32 = 0u;

fn q32(blk: u32, j: u32) -> Q32 {
  let b = q6_sub(blk, j);
  let d = pair_d(blk, QB);
  return Q32(s8(q6_bytes(lw16a(b.ql), lw16a(b.qh), b.t), 32u),
             s8(q6_bytes(lw16a(b.ql + 16u), lw16a(b.qh + 16u), b.t), 32u),
             d * b.sc.x, d * b.sc.y);
}
