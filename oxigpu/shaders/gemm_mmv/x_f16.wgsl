// gemm_mmv.wgsl's x source where an x pass ran (the norm prologue's gemm_xh.wgsl, PERM4): XH [m][k / 8] in
// f16, each 4 k as k0 k2 k1 k3. A lane's share i of a step is one 16-byte word of row w / 16, read a step
// ahead; zeros past the live rows.
@group(0) @binding(6) var<storage, read> XH: array<vec4<u32>>;

var<private> xr: array<vec4<u32>, XPL>;

fn fetch_x(t: u32, lid: u32) {
  let mlim = min(D.m, P.n_tokens);
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    xr[i] = vec4<u32>(0u);
    if (w < 256u && w / 16u < mlim) { xr[i] = XH[(w / 16u) * (D.k / 8u) + 16u * t + w % 16u]; }
  }
}

fn x_word(i: u32) -> vec4<u32> { return xr[i]; }
