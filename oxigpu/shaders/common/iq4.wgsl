// ggml's 16-entry codebook kvalues_iq4nl (IQ4_NL, IQ4_XS), through the table binding
// (common/iq_grid.wgsl): word b holds kvalues[b & 15] in byte 0 and kvalues[b >> 4] in byte 2, as int8.
#include "common/iq_grid.wgsl"

// The codebook values of the 8 nibbles of w, packed as int8: .x the low nibbles' (byte j of w -> byte j),
// .y the high nibbles'. Two lookups per two bytes, then byte moves.
fn iq4w(w: u32) -> vec2<u32> {
  let p = QG[w & 0xFFu] | (QG[(w >> 8u) & 0xFFu] << 8u);     // lo0 lo1 hi0 hi1
  let q = QG[(w >> 16u) & 0xFFu] | (QG[w >> 24u] << 8u);     // lo2 lo3 hi2 hi3
  return vec2<u32>((p & 0xFFFFu) | (q << 16u), (p >> 16u) | (q & 0xFFFF0000u));
}
