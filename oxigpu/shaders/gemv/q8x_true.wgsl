// The integer-dot GEMV (Q8X): each piece's x is quantized once (xquant) and every row reduces it with
// the piece's qdot.
fn xprep(s: u32, xs: XS) -> XQ { return xquant(xs, px(s)); }

fn rdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  if (s == 0u) { return {{PIECE0}}_qdot(0u, blk, i, xs, xq); }
  return {{PIECE1}}_qdot(1u, blk, i, xs, xq);
}
