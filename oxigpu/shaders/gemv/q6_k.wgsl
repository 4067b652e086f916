// Q6_K pieces (210-byte blocks, 2-aligned: funnel word loads): piece i = half n = i / 4, positions
// l0 = 8 (i % 4) + [0, 8) of all four quarters t: low bits from ql[64n + 32 (t % 2) + l] (nibble t / 2),
// high bits from qh[32n + l] >> 2t, assembled four bytes at a time; scale byte 8n + 2t + l0 / 16.
const q6_k_QK: u32 = 256u;
const q6_k_QB: u32 = 210u;
const q6_k_PPB: u32 = 8u;
const q6_k_PX: u32 = 8u;

fn q6_k_gx(i: u32, j: u32) -> u32 { return 128u * (i >> 2u) + 32u * (j >> 1u) + 8u * (i & 3u) + 4u * (j & 1u); }

// Partial dots of the four quarters for one word of ql (a: t = 0, 2; b: t = 1, 3) and of qh.
fn q6_k_quarters(a: u32, b: u32, h: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dot(b2f((a & 0x0F0F0F0Fu) | ((h << 4u) & 0x30303030u), 32.0), x0),
                   dot(b2f((b & 0x0F0F0F0Fu) | ((h << 2u) & 0x30303030u), 32.0), x1),
                   dot(b2f(((a >> 4u) & 0x0F0F0F0Fu) | (h & 0x30303030u), 32.0), x2),
                   dot(b2f(((b >> 4u) & 0x0F0F0F0Fu) | ((h >> 2u) & 0x30303030u), 32.0), x3));
}

// The four int8 scales at bytes 0, 2 (from u.x) and 4, 6 (u.y), plus `hi` (0 or 1), as f32.
fn q6_k_scales(u: vec2<u32>, hi: u32) -> vec4<f32> {
  let sh = vec4<u32>(0u, 16u, 0u, 16u) + 8u * hi;
  return vec4<f32>((bitcast<vec4<i32>>(vec4<u32>(u.x, u.x, u.y, u.y) >> sh) << vec4<u32>(24u)) >> vec4<u32>(24u));
}

fn q6_k_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let n = i >> 2u;
  let l0 = 8u * (i & 3u);
  let a = lw2(s, blk + 64u * n + l0);
  let b = lw2(s, blk + 64u * n + 32u + l0);
  let h = lw2(s, blk + 128u + 32u * n + l0);
  let scf = q6_k_scales(lw2(s, blk + 192u + 8u * n), l0 >> 4u);
  let t = q6_k_quarters(a.x, b.x, h.x, xs[0], xs[2], xs[4], xs[6]) + q6_k_quarters(a.y, b.y, h.y, xs[1], xs[3], xs[5], xs[7]);
  return h16(s, blk + 208u) * dot(scf, t);
}
