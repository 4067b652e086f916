// Generic GEMV pieces for any type, through its quant/<type>.wgsl dq8 snippet: one 8-element chunk per
// piece. Used for the types without a specialized piece file (BF16, Q4_1, Q5_1, Q2_K, Q3_K, Q5_K). The
// snippet reads W, so this piece serves slot 0 only (ops/matmul.py puts a dq8 type there).
#include "quant/{{QUANT}}.wgsl"
const dq8_QK: u32 = QK;
const dq8_QB: u32 = QB;
const dq8_PPB: u32 = QK / 8u;
const dq8_PX: u32 = 2u;

fn dq8_gx(i: u32, j: u32) -> u32 { return 8u * i + 4u * j; }

fn dq8_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let v = dq8(blk, i);
  return dot(v.a, xs[0]) + dot(v.b, xs[1]);
}
