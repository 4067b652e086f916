// Q3_K for gemm_q8.wgsl (quant/q3_k.wgsl's layout): sub-block j = shift t = j % 4 of half h = j / 4: low
// bits (qs[32 h + l] >> 2 t) & 3, high bit (hmask[l] >> (4 h + t)) & 1 (clear: minus 4), so q = both - 4;
// scales per 16 elements (FK 16): d * (sc[8 h + 2 t] - 32), d * (sc[8 h + 2 t + 1] - 32).
#include "quant/q3_k.wgsl"
const FK: u32 = 16u;
const HM: u32 = 0u;

fn q3_k_half(qs: vec4<u32>, hm: vec4<u32>, t: u32, hb: u32) -> vec4<u32> {
  let v = ((qs >> vec4<u32>(2u * t)) & vec4<u32>(0x03030303u)) |
          (((hm >> vec4<u32>(hb)) & vec4<u32>(0x01010101u)) << vec4<u32>(2u));
  return s8(v, 4u);
}

fn q32(blk: u32, j: u32) -> Q32 {
  let h = j >> 2u;
  let t = j & 3u;
  let b = pair_body(blk);   // paired on the GPU: hmask, qs and scales 4-aligned
  let qs = b + 32u + 32u * h;
  let d = pair_d(blk, QB);
  let is = 8u * h + 2u * t;
  return Q32(q3_k_half(lw16a(qs), lw16a(b), t, 4u * h + t), q3_k_half(lw16a(qs + 16u), lw16a(b + 16u), t, 4u * h + t),
             d * q3_scale(b + 96u, is), d * q3_scale(b + 96u, is + 1u));
}
