// IQ2_S for gemm_q8.wgsl (quant/iq2_s.wgsl's layout): sub-block j's four grid entries (10-bit indices)
// with their sign bytes; scales per 16 elements (FK 16): d (0.5 + s) / 4 for each nibble of scales[j].
#include "quant/iq2_s.wgsl"
const FK: u32 = 16u;
const HM: u32 = 0u;

fn iq2_s_entry(qs: u32, qh: u32, signs: u32, l: u32) -> vec2<u32> {
  let e = ((qs >> (8u * l)) & 0xFFu) | ((qh << (8u - 2u * l)) & 0x300u);
  let s = (signs >> (8u * l)) & 0xFFu;
  return vec2<u32>(neg4(QG[2u * e], s & 0xFu), neg4(QG[2u * e + 1u], s >> 4u));
}

fn q32(blk: u32, j: u32) -> Q32 {
  let qs = ld32(blk + 2u + 4u * j);
  let signs = ld32(blk + 34u + 4u * j);
  let qh = ld8(blk + 66u + j);
  let sc = ld8(blk + 74u + j);
  let d = f16at(blk);
  return Q32(vec4<u32>(iq2_s_entry(qs, qh, signs, 0u), iq2_s_entry(qs, qh, signs, 1u)),
             vec4<u32>(iq2_s_entry(qs, qh, signs, 2u), iq2_s_entry(qs, qh, signs, 3u)),
             d * (0.5 + f32(sc & 0xFu)) * 0.25, d * (0.5 + f32(sc >> 4u)) * 0.25);
}
