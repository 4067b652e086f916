// gemm_mmv.wgsl's x source without an x pass: X [m, k] f32 as given, rounded to f16 as it is staged (as
// gemm_xh.wgsl would round it: the same halves), each 4 k as k0 k2 k1 k3. A lane's share i of a step is k
// 8 (w % 16) .. + 7 of row w / 16, two vec4 read a step ahead; zeros past the live rows. Saves the x pass's
// dispatch.
var<private> xr: array<vec4<f32>, 2u * XPL>;

fn fetch_x(t: u32, lid: u32) {
  let mlim = min(D.m, P.n_tokens);
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    xr[2u * i] = vec4<f32>(0.0);
    xr[2u * i + 1u] = vec4<f32>(0.0);
    if (w < 256u && w / 16u < mlim) {
      let o = (w / 16u) * (D.k / 4u) + 32u * t + 2u * (w % 16u);
      xr[2u * i] = X[o];
      xr[2u * i + 1u] = X[o + 1u];
    }
  }
}

fn hx(a: f32, b: f32) -> u32 { return w2(vec2<f16>(f16(a), f16(b))); }

fn x_word(i: u32) -> vec4<u32> {
  let a = xr[2u * i];
  let b = xr[2u * i + 1u];
  return vec4<u32>(hx(a.x, a.z), hx(a.y, a.w), hx(b.x, b.z), hx(b.y, b.w));
}
