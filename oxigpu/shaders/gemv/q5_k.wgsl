// Q5_K pieces (176-byte blocks, 16-aligned: d, dmin f16, scales[12], qh[32], qs[128]): Q4_K's pieces
// (gemv/q4_k.wgsl: piece i holds positions 16 (i % 2) + [0, 16) of sub-blocks 2 (i / 2), low nibbles, and
// 2 (i / 2) + 1, high) with the fifth bits of the same positions from one 16-byte load of qh (bit s of
// qh[l] belongs to sub-block s). Values 0..31, so the integer dots take them as they are.
const q5_k_QK: u32 = 256u;
const q5_k_QB: u32 = 176u;
const q5_k_PPB: u32 = 8u;
const q5_k_PX: u32 = 8u;

fn q5_k_gx(i: u32, j: u32) -> u32 { return 64u * (i >> 1u) + 16u * (i & 1u) + 32u * (j >> 2u) + 4u * (j & 3u); }

// The piece's 5-bit values: elements 0..15 of the piece (low nibbles) and 16..31 (high), one per byte.
fn q5_k_val(s: u32, blk: u32, i: u32) -> array<vec4<u32>, 2> {
  let q = wq(s, (blk >> 4u) + 3u + i);
  let h = wq(s, (blk >> 4u) + 1u + (i & 1u)) >> vec4<u32>(2u * (i >> 1u));
  let m = vec4<u32>(0x0F0F0F0Fu);
  let b = vec4<u32>(0x01010101u);
  return array<vec4<u32>, 2>((q & m) | ((h & b) << vec4<u32>(4u)),
                             ((q >> vec4<u32>(4u)) & m) | (((h >> vec4<u32>(1u)) & b) << vec4<u32>(4u)));
}

// d sc * dot - dmin m * sum x for the two sub-blocks (Q4_K's scales).
fn q5_k_comb(s: u32, blk: u32, i: u32, lo: f32, hi: f32, xl: f32, xh: f32) -> f32 {
  let sm = kscales(wq(s, blk >> 4u), i >> 1u);
  return sm.x * lo - sm.y * xl + sm.z * hi - sm.w * xh;
}

fn q5_k_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let q = q5_k_val(s, blk, i);
  let lo = dot(b2f(q[0].x, 0.0), xs[0]) + dot(b2f(q[0].y, 0.0), xs[1]) +
           dot(b2f(q[0].z, 0.0), xs[2]) + dot(b2f(q[0].w, 0.0), xs[3]);
  let hi = dot(b2f(q[1].x, 0.0), xs[4]) + dot(b2f(q[1].y, 0.0), xs[5]) +
           dot(b2f(q[1].z, 0.0), xs[6]) + dot(b2f(q[1].w, 0.0), xs[7]);
  return q5_k_comb(s, blk, i, lo, hi, hsum(xs[0] + xs[1] + xs[2] + xs[3]), hsum(xs[4] + xs[5] + xs[6] + xs[7]));
}

// The piece's weights as the integer dots take them (wload), once for every x row of a multi-row GEMV
// (wdot); qdot is the two in one.
struct q5_k_W { lo: vec4<u32>, hi: vec4<u32>, sm: vec4<f32> }

fn q5_k_wload(s: u32, blk: u32, i: u32) -> q5_k_W {
  let q = q5_k_val(s, blk, i);
  return q5_k_W(q[0], q[1], kscales(wq(s, blk >> 4u), i >> 1u));
}

fn q5_k_wdot(w: q5_k_W, xq: XQ) -> f32 {
  let lo = f32(idot(w.lo.x, xq.q[0]) + idot(w.lo.y, xq.q[1]) + idot(w.lo.z, xq.q[2]) + idot(w.lo.w, xq.q[3]));
  let hi = f32(idot(w.hi.x, xq.q[4]) + idot(w.hi.y, xq.q[5]) + idot(w.hi.z, xq.q[6]) + idot(w.hi.w, xq.q[7]));
  let sm = w.sm;
  return xq.d * (sm.x * lo - sm.y * f32(xsum(xq, 0u, 4u)) + sm.z * hi - sm.w * f32(xsum(xq, 4u, 4u)));
}

fn q5_k_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  let q = q5_k_val(s, blk, i);
  let lo = idot(q[0].x, xq.q[0]) + idot(q[0].y, xq.q[1]) + idot(q[0].z, xq.q[2]) + idot(q[0].w, xq.q[3]);
  let hi = idot(q[1].x, xq.q[4]) + idot(q[1].y, xq.q[5]) + idot(q[1].z, xq.q[6]) + idot(q[1].w, xq.q[7]);
  return xq.d * q5_k_comb(s, blk, i, f32(lo), f32(hi), f32(xsum(xq, 0u, 4u)), f32(xsum(xq, 4u, 4u)));
}
