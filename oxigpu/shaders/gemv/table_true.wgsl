// The IQ4 codebook words (common/iq4.wgsl's, a byte of two nibbles -> their two int8 values) copied into
// workgroup memory once per workgroup: the GEMV looks up 4 words per 8 weights, and a warp's lookups into
// the storage table cost a cache wavefront per distinct line, against a few bank conflicts here.
#include "common/iq_grid.wgsl"
var<workgroup> QGW: array<u32, 256>;

// Call in uniform control flow, before any lookup.
fn stage_table(lid: u32) {
  for (var i = lid; i < 256u; i += WG) { QGW[i] = QG[i]; }
  workgroupBarrier();
}

// common/iq4.wgsl's iq4w through the staged words: .x the low nibbles' values, .y the high ones'.
fn iq4w_wg(w: u32) -> vec2<u32> {
  let p = iq4w_pq(w);
  return iq4_xperm(p.x, p.y);
}

// The lookups alone: .x the codebook values of w's nibbles in the order (lo0, lo1, hi0, hi1), .y (lo2, lo3,
// hi2, hi3) (lo: a byte's low nibble, hi: its high one). An integer dot takes them against x words in the
// same order (iq4_xperm), permuted once per x row instead of once per weight row.
fn iq4w_pq(w: u32) -> vec2<u32> {
  return vec2<u32>(QGW[w & 0xFFu] | (QGW[(w >> 8u) & 0xFFu] << 8u), QGW[(w >> 16u) & 0xFFu] | (QGW[w >> 24u] << 8u));
}

// x's int8 words a (elements j .. j + 3, the low nibbles' partners) and b (the high nibbles', 16 on) in
// iq4w_pq's order: the 16-bit halves interleaved, (a.lo, b.lo) and (a.hi, b.hi); the same move takes
// iq4w_pq's pairs to element order.
fn iq4_xperm(a: u32, b: u32) -> vec2<u32> {
  return vec2<u32>((a & 0xFFFFu) | (b << 16u), (a >> 16u) | (b & 0xFFFF0000u));
}
