// Slot 1 of the GEMV when the module has one weight type (MIXED false): never read; these stand-ins
// keep gemv/common.wgsl's slot loads well-formed without binding anything more.
fn wd1(i: u32) -> u32 { return W[i]; }
fn wq1(i: u32) -> vec4<u32> { return W4[i]; }
fn bias1(c: u32) -> f32 { return 0.0; }
fn slot1_keep() -> u32 { return 0u; }
fn slot1_rows0() -> u32 { return D.rows; }
fn slot1_wg0() -> u32 { return 0xFFFFFFFFu; }
fn slot1_row_bytes() -> u32 { return D.row_bytes; }
