// gemm_mmv.wgsl's x source where an x pass ran (the norm prologue's gemm_xh.wgsl, PERM4): XH [m][k / 8] in
// f16, each 4 k as k0 k2 k1 k3. A block is XS steps from step t: 16 rows x 16 XS words of 8 halves; a lane's
// share i is word w (row w / (16 XS)), read a block ahead; zeros past the live rows and past k.
@group(0) @binding(6) var<storage, read> XH: array<vec4<u32>>;

var<private> xr: array<vec4<u32>, XPL>;

fn fetch_x(t: u32, lid: u32) {
  let mlim = min(D.m, P.n_tokens);
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    let c = w % (16u * XS);
    xr[i] = vec4<u32>(0u);
    if (w < XW && w / (16u * XS) < mlim && 128u * t + 8u * c < D.k) {
      xr[i] = XH[(w / (16u * XS)) * (D.k / 8u) + 16u * t + c];
    }
  }
}

fn x_word(i: u32) -> vec4<u32> { return xr[i]; }
