// Prefill GEMM on the GPU's matrix units (Dawn's subgroup matrices, where Device.has_mma; ops/gemm.py):
// Y[m, n] = sum_k x[m, k] W[n, k] (+ bias, + residual, multi-output segments: common/matmul_io.wgsl's
// store), f16 products with f32 sums, as llama.cpp's dequantize-then-cuBLAS path. x comes in f16 from the
// x pass (gemm_xh.wgsl, binding 6). Each step stages BK k of an x tile and of a weight tile
// (gemm_mma/<w>.wgsl: dequantized to f16) in workgroup memory, and every subgroup multiplies its FM x TNB
// blocks of 16 x 16 results from them (FM = 4: each fragment loaded from workgroup memory serves more
// products). The next step's x and weights are read from memory into registers
// while the matrix units work on this one (few workgroups fit an SM at prefill sizes, so nothing else
// hides that latency). x is read and staged in words, as the F16 weights are: each subgroup takes one
// row's BK halves side by side and stores consecutive words (a lane's vec4 of 8 halves put its stores in
// 4-way conflicting banks). Tiles wholly inside x and W skip the bounds checks (fetch). The two only pay
// together (F16 weights ~1.2x; apart, each lost): the compiler's register use moves by more than either.
//
// Workgroup: SGM x SGN subgroups of 32 lanes (NVIDIA's size; gemm.py takes this kernel only there), tile
// BM x BN = 16 FM SGM x 16 TNB SGN. Tint wants subgroup-matrix offsets uniform over the workgroup; here they
// are uniform per subgroup, which is what the hardware needs, so that check is switched off below.
// Rows at or past the step's n_tokens read as zero; row tiles wholly past it return at once. ID: matmul_id's
// grouped GEMM over experts (common/gemm_id_true.wgsl: rows gathered per tile, each tile its expert's weights). Split-k
// (SPLITS > 1, common/split_k.wgsl): workgroup z covers k_range(z) and writes partial sums.
// GLU (matmul_glu): W holds D.n gate rows then D.n up rows. Unsplit (TNB 4), each subgroup's 64 tile
// columns are 32 gate rows and the matching up rows (wrow), and it stores ACT(x Wg) * (x Wu) for its 32
// output columns (put_glu), so the gate and up products never leave the workgroup. Split-k, the tiles run
// over the 2 D.n rows as a plain GEMM's and gemm_reduce.wgsl pairs gate and up sums (any tile).
diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "common/split_k.wgsl"
#include "common/gemm_id_{{ID}}.wgsl"
#include "math.wgsl"

const SGM: u32 = {{SGM}}u;
const SGN: u32 = {{SGN}}u;
const FM: u32 = {{FM}}u;         // 16 x 16 blocks per subgroup along m: 2 or 4
const TNB: u32 = {{TNB}}u;       // 16 x 16 blocks per subgroup along n: 2 or 4
const BK: u32 = {{BK}}u;         // k per step: 32 or 64
const SPLITS: u32 = {{SPLITS}}u;
const GLU: bool = {{GLU}};
const GLU_EPI: bool = GLU && SPLITS == 1u;       // the GLU in this kernel's epilogue (else in the reduction)
const BM: u32 = 16u * FM * SGM;
const BN: u32 = 16u * TNB * SGN;
const WG: u32 = 32u * SGM * SGN;
const LD: u32 = BK + 8u;         // halves per staged row: BK and 8 of padding (spreads the matrix loads' banks)
const XPL: u32 = BM * BK / 2u / WG;              // x words (2 halves) per lane per step
const WUN: u32 = BN * BK / WU;                   // weight units (WU halves of a row: gemm_mma/<w>.wgsl) per step
const WPL: u32 = (WUN + WG - 1u) / WG;           // per lane (the last round partial where WUN < WG)
const XPR: u32 = BK / 2u;                        // x words per row and step (a divisor of WG)
const XRS: u32 = WG / XPR;                       // tile rows between a lane's consecutive x words
const UPR: u32 = BK / WU;                        // weight units per row and step (a divisor of WG)
const RS: u32 = WG / UPR;                        // tile rows between a lane's consecutive units

var<workgroup> xs: array<f16, BM * LD>;          // [m][k]
// WT: weights staged transposed, [k][n] (the right matrix row-major). A lane's unit is one row's 32 k; in
// [n][k] the 32 lanes of a store (32 rows, LD halves apart) hit 8 banks (4-way conflicts, every store); in
// [k][n] they write 32 halves side by side. Loaders of 32-weight units only (q32, q4_kh, q6_kh).
const WT: bool = {{WT}};
const LDT: u32 = BN + 8u;                        // halves per staged k row there (8 of padding, as LD)
const WST: u32 = select(1u, LDT, WT);            // ws distance of a row's consecutive k
const WNS: u32 = select(LD, 1u, WT);             // ... and of consecutive rows
var<workgroup> ws: array<f16, {{WSLEN}}>;        // [n][k] (the right matrix column-major) or, WT, [k][n]
const CSS: u32 = min(SGM * SGN, 8u);             // result slots: one 16 x 16 block per subgroup, at most 8
var<workgroup> cs: array<f32, CSS * 256u>;       // results on their way out

#include "gemm_mma/{{WLOAD}}.wgsl"

@group(0) @binding(6) var<storage, read> XH: array<u32>;        // x in f16, [m][k / 2] (gemm_xh.wgsl)

var<private> xr: array<u32, XPL>;               // the next step's x and weights, in registers
var<private> wr: array<WBlock, WPL>;

fn act(v: f32) -> f32 { return {{ACT}}(v); }

// A word's two halves (the loaders' reinterpretation; gemm_mma_units.wgsl has naga's form).
fn h2(u: u32) -> vec2<f16> { return bitcast<vec2<f16>>(u); }

// GLU: the output column of a lane's unit i, tile row r = r0 + RS i (r0 = lid / UPR < RS; n0: the tile's
// first row), and whether the row is an up row. Each subgroup column r / 64 of the tile covers 32 output
// columns from n0 / 2: gate rows, then the matching up rows. With RS a divisor of 32, r0 only moves the row
// within its 32-row group, so every term but r0 is a constant of the unrolled fetch loop (not a division
// of each unit's index at every step: measurably slower).
fn glu_col(n0: u32, r0: u32, i: u32) -> vec2<u32> {
  var r = RS * i;
  var c0 = r0;
  if (32u % RS != 0u) { r += r0; c0 = 0u; }
  return vec2<u32>(n0 / 2u + (r / 64u) * 32u + r % 32u + c0, u32(r % 64u >= 32u));
}

// Weight row of a lane's unit i in a tile wholly inside W: n0 + r, or under GLU the gate or up row of
// its output column.
fn wrow_in(n0: u32, r0: u32, i: u32) -> u32 {
  if (!GLU_EPI) { return n0 + RS * i + r0; }
  let c = glu_col(n0, r0, i);
  return select(c.x, D.n + c.x, c.y != 0u);
}

// wrow_in anywhere: past the last output column (GLU) D.rows, a row out of range (read as zero).
fn wrow_at(n0: u32, r0: u32, i: u32) -> u32 {
  if (GLU_EPI && glu_col(n0, r0, i).x >= D.n) { return D.rows; }
  return wrow_in(n0, r0, i);
}

// Reads step k0's x (row m0 + u / XPR, 2 k at 2 (u % XPR), for u = lid + i WG; zero past the chunk,
// n_tokens or k) and weight units (tile row u / UPR, its unit u % UPR) into xr, wr. XPR and UPR divide
// WG, so a lane's column is the same for all its i and its rows step by XRS, RS: the unrolled loops add
// constants to one base instead of dividing each u.
fn fetch(m0: u32, n0: u32, k0: u32, lid: u32) {
  let mlim = min(D.m, P.n_tokens);
  let m = m0 + lid / XPR;
  let k = k0 + 2u * (lid % XPR);
  let x0 = (m * D.k + k) / 2u;
  if (ID) {   // the tile's pairs' rows, gathered (m0 is 0)
    for (var i = 0u; i < XPL; i++) {
      let mm = m + XRS * i;
      xr[i] = 0u;
      if (x_live(mm) && k < D.k) { xr[i] = XH[(x_src(mm) * D.k + k) / 2u]; }
    }
  } else if (m0 + BM <= mlim && k0 + BK <= D.k) {
    for (var i = 0u; i < XPL; i++) { xr[i] = XH[x0 + XRS * i * (D.k / 2u)]; }
  } else {
    for (var i = 0u; i < XPL; i++) {
      xr[i] = 0u;
      if (m + XRS * i < mlim && k < D.k) { xr[i] = XH[x0 + XRS * i * (D.k / 2u)]; }
    }
  }
  let r0 = lid / UPR;
  let j = k0 / WU + lid % UPR;
  let wfull = k0 + BK <= D.k && select(n0 + BN <= D.rows, n0 / 2u + BN / 2u <= D.n, GLU_EPI);
  if (wfull) {
    for (var i = 0u; i < WPL; i++) {
      if (lid + i * WG < WUN) { wr[i] = w_fast(wrow_in(n0, r0, i), j); }
    }
  } else {
    for (var i = 0u; i < WPL; i++) {
      if (lid + i * WG < WUN) { wr[i] = w_load(wrow_at(n0, r0, i), j); }
    }
  }
}

// Writes xr, wr to xs, ws as f16 (the rows and columns fetch read).
fn stage(lid: u32) {
  let xo = (lid / XPR) * LD + 2u * (lid % XPR);
  for (var i = 0u; i < XPL; i++) {
    let o = xo + XRS * i * LD;
    let h = bitcast<vec2<f16>>(xr[i]);
    xs[o] = h.x; xs[o + 1u] = h.y;
  }
  let wo = (lid / UPR) * WNS + WU * (lid % UPR) * WST;
  for (var i = 0u; i < WPL; i++) {
    if (lid + i * WG < WUN) { w_put(wo + RS * i * WNS, wr[i]); }
  }
}

// Lane e's 8 values of a subgroup's result block c (q = 32 t + e of its 256: row q / 16, column q % 16),
// through the subgroup's cs slot in turn r (past CSS subgroups, they take turns; the others get zeros).
// Every subgroup calls it alike: it holds two barriers.
fn lane_vals(r: u32, sg: u32, e: u32, c: subgroup_matrix_result<f32, 16, 16>) -> array<f32, 8> {
  let mine = sg / CSS == r;
  let slot = (sg % CSS) * 256u;
  var v: array<f32, 8>;
  if (mine) { subgroupMatrixStore(&cs, slot, c, false, 16u); }
  workgroupBarrier();
  if (mine) {
    for (var t = 0u; t < 8u; t++) { v[t] = cs[slot + t * 32u + e]; }
  }
  workgroupBarrier();
  return v;
}

// Block c of a subgroup's results, at (m, n), to Y (split z's partial sums).
fn put_block(z: u32, sg: u32, e: u32, m: u32, n: u32, c: subgroup_matrix_result<f32, 16, 16>) {
  for (var r = 0u; r < SGM * SGN / CSS; r++) {
    let v = lane_vals(r, sg, e, c);
    if (sg / CSS == r) {
      for (var t = 0u; t < 8u; t++) {
        let mm = m + (t * 32u + e) / 16u;
        let nn = n + e % 16u;
        if (out_ok(mm) && nn < D.rows) { put_y(z, out_row(mm), nn, v[t]); }
      }
    }
  }
}

// Gate block g and up block u of a subgroup's results (GLU), output columns n.., to Y as ACT(g) * u.
fn put_glu(sg: u32, e: u32, m: u32, n: u32, g: subgroup_matrix_result<f32, 16, 16>,
           u: subgroup_matrix_result<f32, 16, 16>) {
  for (var r = 0u; r < SGM * SGN / CSS; r++) {
    let gv = lane_vals(r, sg, e, g);
    let uv = lane_vals(r, sg, e, u);
    if (sg / CSS == r) {
      for (var t = 0u; t < 8u; t++) {
        let mm = m + (t * 32u + e) / 16u;
        let nn = n + e % 16u;
        if (mm < D.m && nn < D.n) { store(mm, nn, act(gv[t]) * uv[t]); }
      }
    }
  }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = wid.x * BN;
  let m0 = tile_m0(wid.y, BM);
  if (tile_skip(wid.y, m0)) { return; }   // padding rows only, or ID's other tiles (uniform: no barrier skipped)
  let sg = lid / 32u;
  let sm = sg % SGM;
  let sn = sg / SGM;
  let xo = 16u * FM * sm * LD;
  let wo = 16u * TNB * sn * WNS;
  var c00: subgroup_matrix_result<f32, 16, 16>;
  var c01: subgroup_matrix_result<f32, 16, 16>;
  var c02: subgroup_matrix_result<f32, 16, 16>;
  var c03: subgroup_matrix_result<f32, 16, 16>;
  var c10: subgroup_matrix_result<f32, 16, 16>;
  var c11: subgroup_matrix_result<f32, 16, 16>;
  var c12: subgroup_matrix_result<f32, 16, 16>;
  var c13: subgroup_matrix_result<f32, 16, 16>;
  var c20: subgroup_matrix_result<f32, 16, 16>;
  var c21: subgroup_matrix_result<f32, 16, 16>;
  var c22: subgroup_matrix_result<f32, 16, 16>;
  var c23: subgroup_matrix_result<f32, 16, 16>;
  var c30: subgroup_matrix_result<f32, 16, 16>;
  var c31: subgroup_matrix_result<f32, 16, 16>;
  var c32: subgroup_matrix_result<f32, 16, 16>;
  var c33: subgroup_matrix_result<f32, 16, 16>;
  var kr = k_range(wid.z);
  if (tile_dead(wid.y)) { kr.y = kr.x; }   // ID's padding pairs: zeros
  fetch(m0, n0, kr.x, lid);
  for (var k0 = kr.x; k0 < kr.y; k0 += BK) {
    stage(lid);
    workgroupBarrier();
    if (k0 + BK < kr.y) { fetch(m0, n0, k0 + BK, lid); }
    for (var kk = 0u; kk < BK; kk += 16u) {
      let a0 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&xs, xo + kk, false, LD);
      let a1 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&xs, xo + 16u * LD + kk, false, LD);
      let b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&ws, wo + kk * WST, !WT, select(LD, LDT, WT));
      let b1 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&ws, wo + 16u * WNS + kk * WST, !WT, select(LD, LDT, WT));
      c00 = subgroupMatrixMultiplyAccumulate(a0, b0, c00);
      c01 = subgroupMatrixMultiplyAccumulate(a0, b1, c01);
      c10 = subgroupMatrixMultiplyAccumulate(a1, b0, c10);
      c11 = subgroupMatrixMultiplyAccumulate(a1, b1, c11);
      var a2: subgroup_matrix_left<f16, 16, 16>;    // FM 4's rows 2, 3 (loaded before every use)
      var a3: subgroup_matrix_left<f16, 16, 16>;
      if (FM == 4u) {
        a2 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&xs, xo + 32u * LD + kk, false, LD);
        a3 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&xs, xo + 48u * LD + kk, false, LD);
        c20 = subgroupMatrixMultiplyAccumulate(a2, b0, c20);
        c21 = subgroupMatrixMultiplyAccumulate(a2, b1, c21);
        c30 = subgroupMatrixMultiplyAccumulate(a3, b0, c30);
        c31 = subgroupMatrixMultiplyAccumulate(a3, b1, c31);
      }
      if (TNB == 4u) {
        let b2 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&ws, wo + 32u * WNS + kk * WST, !WT, select(LD, LDT, WT));
        let b3 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&ws, wo + 48u * WNS + kk * WST, !WT, select(LD, LDT, WT));
        c02 = subgroupMatrixMultiplyAccumulate(a0, b2, c02);
        c03 = subgroupMatrixMultiplyAccumulate(a0, b3, c03);
        c12 = subgroupMatrixMultiplyAccumulate(a1, b2, c12);
        c13 = subgroupMatrixMultiplyAccumulate(a1, b3, c13);
        if (FM == 4u) {
          c22 = subgroupMatrixMultiplyAccumulate(a2, b2, c22);
          c23 = subgroupMatrixMultiplyAccumulate(a2, b3, c23);
          c32 = subgroupMatrixMultiplyAccumulate(a3, b2, c32);
          c33 = subgroupMatrixMultiplyAccumulate(a3, b3, c33);
        }
      }
    }
    workgroupBarrier();
  }
  let e = lid % 32u;
  let m = m0 + 16u * FM * sm;
  if (GLU_EPI) {   // TNB 4: blocks 0, 1 gate and 2, 3 up, for the same 32 output columns
    let nc = n0 / 2u + 32u * sn;
    put_glu(sg, e, m, nc, c00, c02);
    put_glu(sg, e, m, nc + 16u, c01, c03);
    put_glu(sg, e, m + 16u, nc, c10, c12);
    put_glu(sg, e, m + 16u, nc + 16u, c11, c13);
    if (FM == 4u) {
      put_glu(sg, e, m + 32u, nc, c20, c22);
      put_glu(sg, e, m + 32u, nc + 16u, c21, c23);
      put_glu(sg, e, m + 48u, nc, c30, c32);
      put_glu(sg, e, m + 48u, nc + 16u, c31, c33);
    }
    return;
  }
  let n = n0 + 16u * TNB * sn;
  put_block(wid.z, sg, e, m, n, c00);
  put_block(wid.z, sg, e, m, n + 16u, c01);
  put_block(wid.z, sg, e, m + 16u, n, c10);
  put_block(wid.z, sg, e, m + 16u, n + 16u, c11);
  if (TNB == 4u) {
    put_block(wid.z, sg, e, m, n + 32u, c02);
    put_block(wid.z, sg, e, m, n + 48u, c03);
    put_block(wid.z, sg, e, m + 16u, n + 32u, c12);
    put_block(wid.z, sg, e, m + 16u, n + 48u, c13);
  }
  if (FM == 4u) {
    put_block(wid.z, sg, e, m + 32u, n, c20);
    put_block(wid.z, sg, e, m + 32u, n + 16u, c21);
    put_block(wid.z, sg, e, m + 48u, n, c30);
    put_block(wid.z, sg, e, m + 48u, n + 16u, c31);
    if (TNB == 4u) {
      put_block(wid.z, sg, e, m + 32u, n + 32u, c22);
      put_block(wid.z, sg, e, m + 32u, n + 48u, c23);
      put_block(wid.z, sg, e, m + 48u, n + 32u, c32);
      put_block(wid.z, sg, e, m + 48u, n + 48u, c33);
    }
  }
}
