// gemm_mma.wgsl's weight rows for the quantized types with a gemm_q8/<type>.wgsl snippet: each 32-block
// through q32 (int8 and its scales, the integer-dot GEMM's loader), dequantized to f16.
#include "gemm_q8/q32.wgsl"
#include "gemm_q8/{{QUANT}}.wgsl"

// 16 int8 (one vec4 of q32) times the scale s, minus the min mn, as 16 halves at ws[o..].
fn put16(o: u32, q: vec4<u32>, s: f32, mn: f32) {
  for (var e = 0u; e < 4u; e++) {
    let h = vec4<f16>(vec4<f32>(unpack4xI8(q[e])) * s - mn);
    ws[o + 4u * e] = h.x; ws[o + 4u * e + 1u] = h.y; ws[o + 4u * e + 2u] = h.z; ws[o + 4u * e + 3u] = h.w;
  }
}

// Half h = u % 2 (elements 16 h .. 16 h + 15 of the 32-block at k0) of weight row n0 + u / 2 into ws
// (zero past the rows): two lanes per row, so a 256-lane workgroup stages its 128 rows in one pass.
fn stage_w(n0: u32, k0: u32, u: u32) {
  let h = u % 2u;
  let q = q32_at(n0 + u / 2u, k0 / 32u);
  let s = select(q.a, q.b, FK == 16u && h == 1u);
  put16((u / 2u) * LD + 16u * h, select(q.lo, q.hi, h == 1u), s, select(0.0, q.b, HM == 1u));
}
