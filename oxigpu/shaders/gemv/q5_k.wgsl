// Q5_K pieces (176-byte blocks, 16-aligned: d, dmin f16, scales[12], qh[32], qs[128]): Q4_K's pieces
// (gemv/q4_k.wgsl: piece i holds positions 16 (i % 2) + [0, 16) of sub-blocks 2 (i / 2), low nibbles, and
// 2 (i / 2) + 1, high) with the fifth bits of the same positions from one 16-byte load of qh (bit s of
// qh[l] belongs to sub-block s). Values 0..31, so the integer dots take them as they are; the header,
// scales and dots are Q4_K's.
#include "gemv/q4_k.wgsl"
const q5_k_QK: u32 = 256u;
const q5_k_QB: u32 = 176u;
const q5_k_PPB: u32 = 8u;
const q5_k_PX: u32 = 8u;

fn q5_k_gx(i: u32, j: u32) -> u32 { return q4_k_gx(i, j); }

// The piece's 5-bit values: elements 0..15 of the piece (low nibbles) and 16..31 (high), one per byte.
fn q5_k_val(s: u32, blk: u32, i: u32) -> array<vec4<u32>, 2> {
  let q = wq(s, (blk >> 4u) + 3u + i);
  let h = wq(s, (blk >> 4u) + 1u + (i & 1u)) >> vec4<u32>(2u * (i >> 1u));
  let m = vec4<u32>(0x0F0F0F0Fu);
  let b = vec4<u32>(0x01010101u);
  return array<vec4<u32>, 2>((q & m) | ((h & b) << vec4<u32>(4u)),
                             ((q >> vec4<u32>(4u)) & m) | (((h >> vec4<u32>(1u)) & b) << vec4<u32>(4u)));
}

fn q5_k_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 { return q4_k_vgdot(s, blk, i, q5_k_val(s, blk, i), xs); }

fn q5_k_wload(s: u32, blk: u32, i: u32) -> q4_k_W { return q4_k_vwload(s, blk, i, q5_k_val(s, blk, i)); }

fn q5_k_wdot(w: q4_k_W, xq: XQ) -> f32 { return q4_k_wdot(w, xq); }

fn q5_k_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  return q4_k_vqdot(s, blk, i, q5_k_val(s, blk, i), xq);
}
