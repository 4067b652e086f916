// gemm_mma.wgsl's weight units for the quantized types with a gemm_q8/<type>.wgsl snippet: each 32-block
// through q32 (int8 and its scales, the integer-dot GEMM's loader), dequantized to f16.
#include "gemm_q8/q32.wgsl"
#include "gemm_q8/{{QUANT}}.wgsl"

const WU: u32 = 32u;     // halves per weight unit: one 32-block
alias WBlock = Q32;

fn w_load(n: u32, j: u32) -> Q32 {
  return q32_at(n, j);
}

// w_load inside W (fetch's tiles wholly inside it): unchecked.
fn w_fast(n: u32, j: u32) -> Q32 {
  return q32(w_base + n * D.row_bytes + (j / (QK / 32u)) * QB, j % (QK / 32u));
}

// 16 int8 (one vec4 of q32) times the scale s, minus the min mn, as 16 halves at ws[o], ws[o + WST] ..
fn put16(o: u32, q: vec4<u32>, s: f32, mn: f32) {
  for (var e = 0u; e < 4u; e++) {
    let h = vec4<f16>(vec4<f32>(unpack4xI8(q[e])) * s - mn);
    let b = o + 4u * e * WST;
    ws[b] = h.x; ws[b + WST] = h.y; ws[b + 2u * WST] = h.z; ws[b + 3u * WST] = h.w;
  }
}

fn w_put(o: u32, q: Q32) {
  let mn = select(0.0, q.b, HM == 1u);
  put16(o, q.lo, q.a, mn);
  put16(o + 16u * WST, q.hi, select(q.a, q.b, FK == 16u), mn);
}
