// Slot 1 of a mixed-type GEMV (MIXED true, ops/matmul.py): the second weight type's rows, their biases,
// and where the two slots meet. Workgroups [0, S1.wg0) compute slot 0's S1.rows0 rows (output columns
// 0 ..), the rest slot 1's D.rows - S1.rows0 rows (output columns S1.rows0 ..).
struct Slot1 {
  rows0: u32,       // rows of slot 0 (the output column of slot 1's first row)
  wg0: u32,         // workgroups of slot 0
  row_bytes: u32,   // bytes per slot-1 row
  _p: u32,
}
@group(0) @binding(9) var<storage, read> W1: array<u32>;
@group(0) @binding(10) var<storage, read> W14: array<vec4<u32>>;
@group(0) @binding(11) var<storage, read> B1: array<f32>;
@group(0) @binding(12) var<uniform> S1: Slot1;

fn wd1(i: u32) -> u32 { return W1[i]; }
fn wq1(i: u32) -> vec4<u32> { return W14[i]; }
fn bias1(c: u32) -> f32 { return B1[c]; }
// Keeps both views in the auto bind-group layout (pieces may read only one of them).
fn slot1_keep() -> u32 { return W1[0] ^ W14[0].x; }
fn slot1_rows0() -> u32 { return S1.rows0; }
fn slot1_wg0() -> u32 { return S1.wg0; }
fn slot1_row_bytes() -> u32 { return S1.row_bytes; }
