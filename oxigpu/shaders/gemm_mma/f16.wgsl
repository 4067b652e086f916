// gemm_mma.wgsl's weight rows for F16 weights: halves copied as they are.

// Half h = u % 2 (elements k0 + 16 h .. + 15) of weight row n0 + u / 2 into ws: zero past the rows and
// past k (F16 rows need not be 32-multiples; they are 8-multiples, so a word never straddles the end).
fn stage_w(n0: u32, k0: u32, u: u32) {
  let n = n0 + u / 2u;
  let k = k0 + 16u * (u % 2u);
  let w = (n * D.row_bytes + 2u * k) / 4u;
  let o = (u / 2u) * LD + 16u * (u % 2u);
  for (var i = 0u; i < 8u; i++) {
    var p = vec2<f32>(0.0);
    if (n < D.rows && k + 2u * i < D.k) { p = unpack2x16float(W[w + i]); }
    ws[o + 2u * i] = f16(p.x);
    ws[o + 2u * i + 1u] = f16(p.y);
  }
}
