// IQ2_XS for gemm_q8.wgsl (quant/iq2_xs.wgsl's layout): sub-block j's four grid entries with their signs;
// scales per 16 elements (FK 16): d (0.5 + s) / 4 for each nibble of scales[j].
#include "quant/iq2_xs.wgsl"
const FK: u32 = 16u;
const HM: u32 = 0u;

fn iq2_xs_entry(q: u32) -> vec2<u32> {
  let e = q & 511u;
  let s = ksign(q >> 9u);
  return vec2<u32>(neg4(QG[2u * e], s & 0xFu), neg4(QG[2u * e + 1u], s >> 4u));
}

fn q32(blk: u32, j: u32) -> Q32 {
  let o = blk + 2u + 8u * j;
  let w0 = ld32(o);
  let w1 = ld32(o + 4u);
  let sc = ld8(blk + 66u + j);
  let d = f16at(blk);
  return Q32(vec4<u32>(iq2_xs_entry(w0 & 0xFFFFu), iq2_xs_entry(w0 >> 16u)),
             vec4<u32>(iq2_xs_entry(w1 & 0xFFFFu), iq2_xs_entry(w1 >> 16u)),
             d * (0.5 + f32(sc & 0xFu)) * 0.25, d * (0.5 + f32(sc >> 4u)) * 0.25);
}
