// The prefill GEMMs' rows when they are not the experts' grouped GEMM (ID false): the workgroup's row tile
// wid.y covers x rows and output rows m0 = BM wid.y ..; row tiles wholly past n_tokens return at once.
const ID: bool = false;
const w_base: u32 = 0u;   // the first byte of the weights' rows in W (a constant: nothing to add)

fn tile_m0(wy: u32, bm: u32) -> u32 { return wy * bm; }
fn tile_skip(wy: u32, m0: u32) -> bool { return m0 >= P.n_tokens; }
fn tile_dead(wy: u32) -> bool { return false; }
fn x_live(m: u32) -> bool { return m < D.m && m < P.n_tokens; }
fn x_src(m: u32) -> u32 { return m; }
fn out_ok(m: u32) -> bool { return m < D.m; }
fn out_row(m: u32) -> u32 { return m; }
