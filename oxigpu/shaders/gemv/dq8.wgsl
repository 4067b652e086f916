// Generic GEMV pieces for any type, through its dq8 snippet: one 8-element chunk per piece.
// Used for the types without a specialized piece file (BF16, Q4_1, Q5_1, Q2_K, Q3_K, Q5_K).
const PPB: u32 = QK / 8u;
const PX: u32 = 2u;

fn gx(i: u32, j: u32) -> u32 { return 8u * i + 4u * j; }

fn gdot(blk: u32, i: u32, xs: XS) -> f32 {
  let v = dq8(blk, i);
  return dot(v.a, xs[0]) + dot(v.b, xs[1]);
}
