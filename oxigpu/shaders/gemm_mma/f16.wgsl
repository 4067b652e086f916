// gemm_mma.wgsl's weight units for F16 weights: one word (2 halves) of a row, copied as it is. Word units
// make each subgroup's loads one row's BK halves side by side (coalesced: 4 sectors an instruction, where
// 32-half units per lane touched 32) and its workgroup-memory stores consecutive words (no bank conflicts).

const WU: u32 = 2u;
alias WBlock = u32;

// Halves 2 j, 2 j + 1 of weight row n: zero past the rows and past k (F16 rows are 8-multiples).
fn w_load(n: u32, j: u32) -> u32 {
  if (n < D.rows && 2u * j < D.k) { return w_fast(n, j); }
  return 0u;
}

// w_load inside W (fetch's tiles wholly inside it): unchecked.
fn w_fast(n: u32, j: u32) -> u32 { return W[(w_base + n * D.row_bytes) / 4u + j]; }

fn w_put(o: u32, b: u32) {
  let h = h2(b);
  ws[o] = h.x;
  ws[o + 1u] = h.y;
}
