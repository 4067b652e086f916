// gemm_mma.wgsl's weight units for F16 weights: 32 halves of a row, copied as they are.

struct WBlock { v: array<vec4<u32>, 4> }

// Halves 32 j .. 32 j + 31 of weight row n: zero past the rows and past k (F16 rows need not be
// 32-multiples; they are 8-multiples, so a vec4 never straddles the end).
fn w_load(n: u32, j: u32) -> WBlock {
  var b: WBlock;
  if (n < D.rows) {
    let w = n * D.row_bytes / 4u + 16u * j;
    for (var i = 0u; i < 4u; i++) {
      let o = w + 4u * i;
      if (32u * j + 8u * i < D.k) { b.v[i] = vec4<u32>(W[o], W[o + 1u], W[o + 2u], W[o + 3u]); }
    }
  }
  return b;
}

fn w_put(o: u32, b: WBlock) {
  for (var i = 0u; i < 4u; i++) {
    for (var e = 0u; e < 4u; e++) {
      let h = bitcast<vec2<f16>>(b.v[i][e]);
      ws[o + 8u * i + 2u * e] = h.x;
      ws[o + 8u * i + 2u * e + 1u] = h.y;
    }
  }
}
