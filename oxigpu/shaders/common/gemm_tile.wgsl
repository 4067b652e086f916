// Shared by the register-tiled prefill GEMMs (gemm_tiled.wgsl: f32 FMAs; gemm_q8.wgsl: integer dots):
// which outputs a compute thread owns and the epilogue (split-k's part: common/split_k.wgsl). The
// including kernel defines TM, TN (4 or 8: outputs per thread), BK (inner elements per step) and SPLITS.
//
// Compute thread lid (< 256) owns rows 4 ty + 64 a + (0..3) and columns 4 tx + 64 b + (0..3), a < TM / 4,
// b < TN / 4: a warp holds 4 ty x 8 tx, so its vec4 reads of a k row of the x and weight tiles (k-major,
// 4 rows or columns per vec4) cover 4 and 8 distinct 16-byte slots.
fn tile_ty(lid: u32) -> u32 { return (lid / 64u) * 4u + (lid % 32u) / 8u; }
fn tile_tx(lid: u32) -> u32 { return ((lid / 32u) % 2u) * 8u + lid % 8u; }

#include "common/split_k.wgsl"
#include "common/gemm_id_{{ID}}.wgsl"

// Tile row m's outputs (output row out_row(m)) at columns n + (0..3) (v0) and n + 64 + (0..3) (v1, TN 8 only).
fn store_row(z: u32, m: u32, n: u32, v0: vec4<f32>, v1: vec4<f32>) {
  if (!out_ok(m)) { return; }
  let mo = out_row(m);
  for (var j = 0u; j < 4u; j++) {
    if (n + j < D.rows) { put_y(z, mo, n + j, v0[j]); }
    if (TN == 8u && n + 64u + j < D.rows) { put_y(z, mo, n + 64u + j, v1[j]); }
  }
}

// The thread's outputs at (m, n) = (m0 + 4 ty, n0 + 4 tx): c<r>_<b> is row m + r (r < 4) or m + 64 + r - 4,
// columns n + 64 b + (0..3); rows 4..7 only with TM 8.
fn store_tile(z: u32, m: u32, n: u32, c0_0: vec4<f32>, c0_1: vec4<f32>, c1_0: vec4<f32>, c1_1: vec4<f32>,
              c2_0: vec4<f32>, c2_1: vec4<f32>, c3_0: vec4<f32>, c3_1: vec4<f32>, c4_0: vec4<f32>,
              c4_1: vec4<f32>, c5_0: vec4<f32>, c5_1: vec4<f32>, c6_0: vec4<f32>, c6_1: vec4<f32>,
              c7_0: vec4<f32>, c7_1: vec4<f32>) {
  store_row(z, m, n, c0_0, c0_1);
  store_row(z, m + 1u, n, c1_0, c1_1);
  store_row(z, m + 2u, n, c2_0, c2_1);
  store_row(z, m + 3u, n, c3_0, c3_1);
  if (TM == 8u) {
    store_row(z, m + 64u, n, c4_0, c4_1);
    store_row(z, m + 65u, n, c5_0, c5_1);
    store_row(z, m + 66u, n, c6_0, c6_1);
    store_row(z, m + 67u, n, c7_0, c7_1);
  }
}
