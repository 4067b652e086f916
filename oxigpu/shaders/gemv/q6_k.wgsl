// Q6_K pieces (210-byte blocks in pairs, backends/wgpu/layout.py: the body 4-aligned at pair_body(blk), d
// apart): piece i = half n = i / 4, positions
// l0 = 8 (i % 4) + [0, 8) of all four quarters t: low bits from ql[64n + 32 (t % 2) + l] (nibble t / 2),
// high bits from qh[32n + l] >> 2t, assembled four bytes at a time; scale byte 8n + 2t + l0 / 16.
const q6_k_QK: u32 = 256u;
const q6_k_QB: u32 = 210u;
const q6_k_PPB: u32 = 8u;
const q6_k_PX: u32 = 8u;

fn q6_k_gx(i: u32, j: u32) -> u32 { return 128u * (i >> 2u) + 32u * (j >> 1u) + 8u * (i & 3u) + 4u * (j & 1u); }

// The 6-bit values (0..63, before the -32) of the four quarters t for one word of ql (a: t = 0, 2;
// b: t = 1, 3) and of qh.
fn q6_k_words(a: u32, b: u32, h: u32) -> vec4<u32> {
  return vec4<u32>((a & 0x0F0F0F0Fu) | ((h << 4u) & 0x30303030u),
                   (b & 0x0F0F0F0Fu) | ((h << 2u) & 0x30303030u),
                   ((a >> 4u) & 0x0F0F0F0Fu) | (h & 0x30303030u),
                   ((b >> 4u) & 0x0F0F0F0Fu) | ((h >> 2u) & 0x30303030u));
}

// Partial dots of the four quarters for one word each of ql and qh.
fn q6_k_quarters(u: vec4<u32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dot(b2f(u.x, 32.0), x0), dot(b2f(u.y, 32.0), x1), dot(b2f(u.z, 32.0), x2), dot(b2f(u.w, 32.0), x3));
}

// The four int8 scales at bytes 0, 2 (from u.x) and 4, 6 (u.y), plus `hi` (0 or 1), as f32.
fn q6_k_scales(u: vec2<u32>, hi: u32) -> vec4<f32> {
  let sh = vec4<u32>(0u, 16u, 0u, 16u) + 8u * hi;
  return vec4<f32>((bitcast<vec4<i32>>(vec4<u32>(u.x, u.x, u.y, u.y) >> sh) << vec4<u32>(24u)) >> vec4<u32>(24u));
}

// The piece's quarter words (u0 from the first word of ql/qh, u1 the second) and its scales times d.
struct Q6P { u0: vec4<u32>, u1: vec4<u32>, sc: vec4<f32> }

// Words w, w + 1 of slot s.
fn q6_k_w2(s: u32, w: u32) -> vec2<u32> { return vec2<u32>(wd(s, w), wd(s, w + 1u)); }

fn q6_k_piece(s: u32, blk: u32, i: u32) -> Q6P {
  let n = i >> 2u;
  let l0 = 2u * (i & 3u);   // in words
  let w = pair_body(blk) >> 2u;
  let a = q6_k_w2(s, w + 16u * n + l0);
  let b = q6_k_w2(s, w + 16u * n + 8u + l0);
  let h = q6_k_w2(s, w + 32u + 8u * n + l0);
  let scf = q6_k_scales(q6_k_w2(s, w + 48u + 2u * n), l0 >> 2u) * pair_h16(s, blk, q6_k_QB);
  return Q6P(q6_k_words(a.x, b.x, h.x), q6_k_words(a.y, b.y, h.y), scf);
}

fn q6_k_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let p = q6_k_piece(s, blk, i);
  return dot(p.sc, q6_k_quarters(p.u0, xs[0], xs[2], xs[4], xs[6]) + q6_k_quarters(p.u1, xs[1], xs[3], xs[5], xs[7]));
}

// The multi-row GEMV's split of qdot (the same expressions): the piece loaded once (wload), reduced per
// x row (wdot).
alias q6_k_W = Q6P;
fn q6_k_wload(s: u32, blk: u32, i: u32) -> Q6P { return q6_k_piece(s, blk, i); }

fn q6_k_wdot(p: Q6P, xq: XQ) -> f32 {
  var t: vec4<i32>;
  t.x = idot(p.u0.x, xq.q[0]) + idot(p.u1.x, xq.q[1]) - 32 * xsum(xq, 0u, 2u);
  t.y = idot(p.u0.y, xq.q[2]) + idot(p.u1.y, xq.q[3]) - 32 * xsum(xq, 2u, 2u);
  t.z = idot(p.u0.z, xq.q[4]) + idot(p.u1.z, xq.q[5]) - 32 * xsum(xq, 4u, 2u);
  t.w = idot(p.u0.w, xq.q[6]) + idot(p.u1.w, xq.q[7]) - 32 * xsum(xq, 6u, 2u);
  return xq.d * dot(p.sc, vec4<f32>(t));
}

// Quarter t multiplies xq.q[2t] and xq.q[2t + 1]; the -32 offset is 32 times the sum of those x bytes.
fn q6_k_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  let p = q6_k_piece(s, blk, i);
  var t: vec4<i32>;
  t.x = idot(p.u0.x, xq.q[0]) + idot(p.u1.x, xq.q[1]) - 32 * xsum(xq, 0u, 2u);
  t.y = idot(p.u0.y, xq.q[2]) + idot(p.u1.y, xq.q[3]) - 32 * xsum(xq, 2u, 2u);
  t.z = idot(p.u0.z, xq.q[4]) + idot(p.u1.z, xq.q[5]) - 32 * xsum(xq, 4u, 2u);
  t.w = idot(p.u0.w, xq.q[6]) + idot(p.u1.w, xq.q[7]) - 32 * xsum(xq, 6u, 2u);
  return xq.d * dot(p.sc, vec4<f32>(t));
}
