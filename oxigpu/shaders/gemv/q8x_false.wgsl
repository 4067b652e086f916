// The float GEMV (Q8X false): x stays f32; xq is never computed or read.
fn xprep(s: u32, xs: XS) -> XQ { var r: XQ; return r; }

fn rdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 { return gdot(s, blk, i, xs); }
