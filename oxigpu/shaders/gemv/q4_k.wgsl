// Q4_K pieces (144-byte blocks, 16-aligned: d, dmin f16, scales[12], qs[128]): one 16-byte load of qs
// each (8 per block). Piece i holds positions 16 (i % 2) + [0, 16) of sub-blocks 2 (i / 2) (low nibbles)
// and 2 (i / 2) + 1 (high); the 16-byte header is one more load, shared by the block's 8 lanes.
// sum x (d sc q - dmin m) = d sc * sum x q - dmin m * sum x (the x sums do not depend on the row).
const q4_k_QK: u32 = 256u;
const q4_k_QB: u32 = 144u;
const q4_k_PPB: u32 = 8u;
const q4_k_PX: u32 = 8u;

fn q4_k_gx(i: u32, j: u32) -> u32 { return 64u * (i >> 1u) + 16u * (i & 1u) + 32u * (j >> 2u) + 4u * (j & 3u); }

// The piece's 16 bytes of qs as low nibbles (elements 0..15 of the piece) and high ones (16..31).
fn q4_k_nib(s: u32, blk: u32, i: u32) -> array<vec4<u32>, 2> {
  let q = wq(s, (blk >> 4u) + 1u + i);
  return array<vec4<u32>, 2>(q & vec4<u32>(0x0F0F0F0Fu), (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu));
}

// d sc * dot - dmin m * sum x for the two sub-blocks, from the dots and the x sums of each.
fn q4_k_comb(s: u32, blk: u32, i: u32, lo: f32, hi: f32, xl: f32, xh: f32) -> f32 {
  let sm = kscales(wq(s, blk >> 4u), i >> 1u);
  return sm.x * lo - sm.y * xl + sm.z * hi - sm.w * xh;
}

// The float dot of the piece's values q (q4_k_nib's layout; Q5_K's pieces pass theirs: gemv/q5_k.wgsl).
fn q4_k_vgdot(s: u32, blk: u32, i: u32, q: array<vec4<u32>, 2>, xs: XS) -> f32 {
  let lo = dot(b2f(q[0].x, 0.0), xs[0]) + dot(b2f(q[0].y, 0.0), xs[1]) +
           dot(b2f(q[0].z, 0.0), xs[2]) + dot(b2f(q[0].w, 0.0), xs[3]);
  let hi = dot(b2f(q[1].x, 0.0), xs[4]) + dot(b2f(q[1].y, 0.0), xs[5]) +
           dot(b2f(q[1].z, 0.0), xs[6]) + dot(b2f(q[1].w, 0.0), xs[7]);
  return q4_k_comb(s, blk, i, lo, hi, hsum(xs[0] + xs[1] + xs[2] + xs[3]), hsum(xs[4] + xs[5] + xs[6] + xs[7]));
}

fn q4_k_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  return q4_k_vgdot(s, blk, i, q4_k_nib(s, blk, i), xs);
}

// The piece's weights as the integer dots take them (wload), once for every x row of a multi-row GEMV
// (wdot); qdot is the two in one.
struct q4_k_W { lo: vec4<u32>, hi: vec4<u32>, sm: vec4<f32> }

// The piece's values q (q4_k_nib's layout) with the scales of its sub-blocks.
fn q4_k_vwload(s: u32, blk: u32, i: u32, q: array<vec4<u32>, 2>) -> q4_k_W {
  return q4_k_W(q[0], q[1], kscales(wq(s, blk >> 4u), i >> 1u));
}

fn q4_k_wload(s: u32, blk: u32, i: u32) -> q4_k_W {
  return q4_k_vwload(s, blk, i, q4_k_nib(s, blk, i));
}

fn q4_k_wdot(w: q4_k_W, xq: XQ) -> f32 {
  let lo = f32(idot(w.lo.x, xq.q[0]) + idot(w.lo.y, xq.q[1]) + idot(w.lo.z, xq.q[2]) + idot(w.lo.w, xq.q[3]));
  let hi = f32(idot(w.hi.x, xq.q[4]) + idot(w.hi.y, xq.q[5]) + idot(w.hi.z, xq.q[6]) + idot(w.hi.w, xq.q[7]));
  let sm = w.sm;
  return xq.d * (sm.x * lo - sm.y * f32(xsum(xq, 0u, 4u)) + sm.z * hi - sm.w * f32(xsum(xq, 4u, 4u)));
}

// The integer dot of the piece's values q (q4_k_nib's layout).
fn q4_k_vqdot(s: u32, blk: u32, i: u32, q: array<vec4<u32>, 2>, xq: XQ) -> f32 {
  let lo = idot(q[0].x, xq.q[0]) + idot(q[0].y, xq.q[1]) + idot(q[0].z, xq.q[2]) + idot(q[0].w, xq.q[3]);
  let hi = idot(q[1].x, xq.q[4]) + idot(q[1].y, xq.q[5]) + idot(q[1].z, xq.q[6]) + idot(q[1].w, xq.q[7]);
  return xq.d * q4_k_comb(s, blk, i, f32(lo), f32(hi), f32(xsum(xq, 0u, 4u)), f32(xsum(xq, 4u, 4u)));
}

fn q4_k_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  return q4_k_vqdot(s, blk, i, q4_k_nib(s, blk, i), xq);
}
