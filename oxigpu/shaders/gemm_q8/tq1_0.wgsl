// TQ1_0 for gemm_q8.wgsl (quant/tq1_0.wgsl's layout): sub-block j's base-3 digits minus 1 as int8; scale
// d. j < 5: digit j of qs[0..32]; j = 5, 6: digits 2 (j - 5), +1 of qs[32..48]; j = 7: digit 4 of
// qs[32..48], then digits 0..3 of qh[0..4].
#include "quant/tq1_0.wgsl"
const FK: u32 = 32u;
const HM: u32 = 0u;

// Digit j (0..4) of each byte of w, minus 1, as packed int8.
fn tq1_word(w: u32, j: u32) -> u32 {
  let p = select(select(1u, 3u, j == 1u), select(select(9u, 27u, j == 3u), 81u, j == 4u), j >= 2u);
  let v = (((bytes4(w) * p) & vec4<u32>(0xFFu)) * 3u) >> vec4<u32>(8u);
  return s8(vec4<u32>(v.x | (v.y << 8u) | (v.z << 16u) | (v.w << 24u)), 1u).x;
}

fn tq1_words(q: vec4<u32>, j: u32) -> vec4<u32> {
  return vec4<u32>(tq1_word(q.x, j), tq1_word(q.y, j), tq1_word(q.z, j), tq1_word(q.w, j));
}

fn q32(blk: u32, j: u32) -> Q32 {
  let d = f16at(blk + 52u);
  if (j < 5u) {
    return Q32(tq1_words(lw16(blk), j), tq1_words(lw16(blk + 16u), j), d, 0.0);
  }
  let q = lw16(blk + 32u);
  if (j < 7u) {
    return Q32(tq1_words(q, 2u * (j - 5u)), tq1_words(q, 2u * (j - 5u) + 1u), d, 0.0);
  }
  let h = ld32(blk + 48u);
  return Q32(tq1_words(q, 4u), vec4<u32>(tq1_word(h, 0u), tq1_word(h, 1u), tq1_word(h, 2u), tq1_word(h, 3u)), d, 0.0);
}
