// The GEMV's x rows and weights when it is not an experts' GEMV (EXPERT false): x row m is output row m,
// every row reads the one weight matrix.
fn x_of(m: u32) -> u32 { return m; }
fn x_rows() -> u32 { return D.m; }
fn expert_base() -> u32 { return 0u; }
fn glu_up() -> u32 { return D.n; }
fn expert_begin(m: u32) -> bool { return true; }
fn expert_live(m: u32) -> bool { return true; }
