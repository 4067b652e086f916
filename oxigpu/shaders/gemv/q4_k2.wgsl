// Q4_K pieces of two consecutive qs words (16 per block): piece i is words 2 (i % 4), +1 of sub-block
// pair g = i / 4, elements 64 g + 8 (i % 4) + [0, 8) (low nibbles) and 32 more (high): one scale decode
// per 2 words, x lanes 32 bytes apart.
const q4_k2_QK: u32 = 256u;
const q4_k2_QB: u32 = 144u;
const q4_k2_PPB: u32 = 16u;
const q4_k2_PX: u32 = 4u;

fn q4_k2_gx(i: u32, j: u32) -> u32 { return 64u * (i >> 2u) + 8u * (i & 3u) + 4u * (j & 1u) + 32u * (j >> 1u); }

// The piece's two words as low nibbles (.xy: elements 0..7) and high ones (.zw: 8..15).
fn q4_k2_nib(s: u32, blk: u32, i: u32) -> vec4<u32> {
  let w = (blk >> 2u) + 4u + 2u * i;
  let q = vec2<u32>(wd(s, w), wd(s, w + 1u));
  return vec4<u32>(q & vec2<u32>(0x0F0F0F0Fu), (q >> vec2<u32>(4u)) & vec2<u32>(0x0F0F0F0Fu));
}

fn q4_k2_comb(s: u32, blk: u32, i: u32, lo: f32, hi: f32, xl: f32, xh: f32) -> f32 {
  let sm = kscales(wq(s, blk >> 4u), i >> 2u);
  return sm.x * lo - sm.y * xl + sm.z * hi - sm.w * xh;
}

fn q4_k2_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let q = q4_k2_nib(s, blk, i);
  let lo = dot(b2f(q.x, 0.0), xs[0]) + dot(b2f(q.y, 0.0), xs[1]);
  let hi = dot(b2f(q.z, 0.0), xs[2]) + dot(b2f(q.w, 0.0), xs[3]);
  return q4_k2_comb(s, blk, i, lo, hi, hsum(xs[0] + xs[1]), hsum(xs[2] + xs[3]));
}

// The piece's weights as the integer dots take them (wload), once for every x row of a multi-row GEMV
// (wdot); qdot is the two in one.
struct q4_k2_W { q: vec4<u32>, sm: vec4<f32> }

fn q4_k2_wload(s: u32, blk: u32, i: u32) -> q4_k2_W {
  return q4_k2_W(q4_k2_nib(s, blk, i), kscales(wq(s, blk >> 4u), i >> 2u));
}

fn q4_k2_wdot(w: q4_k2_W, xq: XQ) -> f32 {
  let lo = f32(idot(w.q.x, xq.q[0]) + idot(w.q.y, xq.q[1]));
  let hi = f32(idot(w.q.z, xq.q[2]) + idot(w.q.w, xq.q[3]));
  let sm = w.sm;
  return xq.d * (sm.x * lo - sm.y * f32(xsum(xq, 0u, 2u)) + sm.z * hi - sm.w * f32(xsum(xq, 2u, 2u)));
}

fn q4_k2_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  let q = q4_k2_nib(s, blk, i);
  let lo = idot(q.x, xq.q[0]) + idot(q.y, xq.q[1]);
  let hi = idot(q.z, xq.q[2]) + idot(q.w, xq.q[3]);
  return xq.d * q4_k2_comb(s, blk, i, f32(lo), f32(hi), f32(xsum(xq, 0u, 2u)), f32(xsum(xq, 2u, 2u)));
}
