// gemm_mma.wgsl's weight units for the types without a gemm_q8/<type>.wgsl loader (F32, BF16, Q2_K: mins
// per 16 elements): 8 elements of a row through the type's quant/<type>.wgsl dq8, rounded to f16.
#include "quant/{{QUANT}}.wgsl"

const WU: u32 = 8u;      // halves per weight unit: one dq8 chunk
alias WBlock = V8;

// Chunk j (elements 8 j ..) of weight row n; zero past the rows and past k.
fn w_load(n: u32, j: u32) -> V8 {
  if (n < D.rows && j < D.k / 8u) { return w_fast(n, j); }
  return V8(vec4<f32>(0.0), vec4<f32>(0.0));
}

// w_load inside W (fetch's tiles wholly inside it): unchecked.
fn w_fast(n: u32, j: u32) -> V8 {
  return dq8(w_base + n * D.row_bytes + (j / (QK / 8u)) * QB, j % (QK / 8u));
}

fn w_put(o: u32, v: V8) {
  let a = vec4<f16>(v.a);
  let b = vec4<f16>(v.b);
  ws[o] = a.x; ws[o + 1u] = a.y; ws[o + 2u] = a.z; ws[o + 3u] = a.w;
  ws[o + 4u] = b.x; ws[o + 5u] = b.y; ws[o + 6u] = b.z; ws[o + 7u] = b.w;
}
