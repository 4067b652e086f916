// Q4_K pieces of two consecutive qs words (16 per block): piece i is words 2 (i % 4), +1 of sub-block
// pair g = i / 4, elements 64 g + 8 (i % 4) + [0, 8) (low nibbles) and 32 more (high): one scale decode
// per 2 words, x lanes 32 bytes apart.
const q4_k2_QK: u32 = 256u;
const q4_k2_QB: u32 = 144u;
const q4_k2_PPB: u32 = 16u;
const q4_k2_PX: u32 = 4u;

fn q4_k2_gx(i: u32, j: u32) -> u32 { return 64u * (i >> 2u) + 8u * (i & 3u) + 4u * (j & 1u) + 32u * (j >> 1u); }

fn q4_k2_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let sm = kscales(wq(s, blk >> 4u), i >> 2u);
  let w = (blk >> 2u) + 4u + 2u * i;
  let q0 = wd(s, w);
  let q1 = wd(s, w + 1u);
  let lo = dot(b2f(q0 & 0x0F0F0F0Fu, 0.0), xs[0]) + dot(b2f(q1 & 0x0F0F0F0Fu, 0.0), xs[1]);
  let hi = dot(b2f((q0 >> 4u) & 0x0F0F0F0Fu, 0.0), xs[2]) + dot(b2f((q1 >> 4u) & 0x0F0F0F0Fu, 0.0), xs[3]);
  return sm.x * lo - sm.y * hsum(xs[0] + xs[1]) + sm.z * hi - sm.w * hsum(xs[2] + xs[3]);
}
