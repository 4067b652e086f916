// Q4_K pieces (144-byte blocks, 16-aligned: d, dmin f16, scales[12], qs[128]): one 16-byte load of qs
// each (8 per block). Piece i holds positions 16 (i % 2) + [0, 16) of sub-blocks 2 (i / 2) (low nibbles)
// and 2 (i / 2) + 1 (high); the 16-byte header is one more load, shared by the block's 8 lanes.
// sum x (d sc q - dmin m) = d sc * sum x q - dmin m * sum x (the x sums do not depend on the row).
const q4_k_QK: u32 = 256u;
const q4_k_QB: u32 = 144u;
const q4_k_PPB: u32 = 8u;
const q4_k_PX: u32 = 8u;

fn q4_k_gx(i: u32, j: u32) -> u32 { return 64u * (i >> 1u) + 16u * (i & 1u) + 32u * (j >> 2u) + 4u * (j & 3u); }

fn q4_k_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let b4 = blk >> 4u;
  let sm = kscales(wq(s, b4), i >> 1u);
  let q = wq(s, b4 + 1u + i);
  let lo = dot(b2f(q.x & 0x0F0F0F0Fu, 0.0), xs[0]) + dot(b2f(q.y & 0x0F0F0F0Fu, 0.0), xs[1]) +
           dot(b2f(q.z & 0x0F0F0F0Fu, 0.0), xs[2]) + dot(b2f(q.w & 0x0F0F0F0Fu, 0.0), xs[3]);
  let hi = dot(b2f((q.x >> 4u) & 0x0F0F0F0Fu, 0.0), xs[4]) + dot(b2f((q.y >> 4u) & 0x0F0F0F0Fu, 0.0), xs[5]) +
           dot(b2f((q.z >> 4u) & 0x0F0F0F0Fu, 0.0), xs[6]) + dot(b2f((q.w >> 4u) & 0x0F0F0F0Fu, 0.0), xs[7]);
  let xl = hsum(xs[0] + xs[1] + xs[2] + xs[3]);
  let xh = hsum(xs[4] + xs[5] + xs[6] + xs[7]);
  return sm.x * lo - sm.y * xl + sm.z * hi - sm.w * xh;
}
