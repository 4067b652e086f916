// Q6_K pieces (210-byte blocks, 2-aligned: funnel word loads): piece i = half n = i / 4, positions
// l0 = 8 (i % 4) + [0, 8) of all four quarters t: low bits from ql[64n + 32 (t % 2) + l] (nibble t / 2),
// high bits from qh[32n + l] >> 2t, assembled four bytes at a time; scale byte 8n + 2t + l0 / 16.
const PPB: u32 = 8u;
const PX: u32 = 8u;

fn gx(i: u32, j: u32) -> u32 { return 128u * (i >> 2u) + 32u * (j >> 1u) + 8u * (i & 3u) + 4u * (j & 1u); }

fn gdot(blk: u32, i: u32, xs: array<vec4<f32>, PX>) -> f32 {
  let n = i >> 2u;
  let l0 = 8u * (i & 3u);
  let a = lw2(blk + 64u * n + l0);
  let b = lw2(blk + 64u * n + 32u + l0);
  let h = lw2(blk + 128u + 32u * n + l0);
  let sc = lw2(blk + 192u + 8u * n);
  let sh = vec4<u32>(0u, 16u, 0u, 16u) + 8u * (l0 >> 4u);
  let scf = vec4<f32>((bitcast<vec4<i32>>(vec4<u32>(sc.x, sc.x, sc.y, sc.y) >> sh) << vec4<u32>(24u)) >> vec4<u32>(24u));
  var t = vec4<f32>(0.0);
  for (var u = 0u; u < 2u; u++) {
    let aw = a[u]; let bw = b[u]; let hw = h[u];
    t.x += dot(b2f((aw & 0x0F0F0F0Fu) | ((hw << 4u) & 0x30303030u), 32.0), xs[u]);
    t.y += dot(b2f((bw & 0x0F0F0F0Fu) | ((hw << 2u) & 0x30303030u), 32.0), xs[2u + u]);
    t.z += dot(b2f(((aw >> 4u) & 0x0F0F0F0Fu) | (hw & 0x30303030u), 32.0), xs[4u + u]);
    t.w += dot(b2f(((bw >> 4u) & 0x0F0F0F0Fu) | ((hw >> 2u) & 0x30303030u), 32.0), xs[6u + u]);
  }
  return h16(blk + 208u) * dot(scf, t);
}
