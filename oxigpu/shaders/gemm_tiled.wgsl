// Register-tiled GEMM for prefill chunks (R > 32 rows): Y[m, n] = sum_k X[m, k] * W[n, k] (+ bias,
// + residual, multi-output segments: common/matmul_io.wgsl's store), W raw GGUF blocks.
//
// A workgroup computes a BM x BN = 16 TM x 16 TN tile (TM, TN: 4 or 8; ops/gemm.py picks them per shape)
// with 256 FMA threads: thread (ty, tx) owns TM x TN outputs (common/gemm_tile.wgsl), so per k one vec4
// of x per 4 rows and one vec4 of W per 4 columns from workgroup memory feed TM x TN FMAs (8 x 8: 4 vec4
// loads per 64 FMAs).
//
// Each BK step (16 or 32) dequantizes the BN x BK weights once (8-element chunks, BK / 8 threads per row,
// so a warp reads few rows) and copies BM x BK of x, both stored k-major in workgroup memory: ws as WT
// (f32; f16 only on request, for F16 weights, which it holds exactly), xs as f32, so results match the
// f32 numpy backend. Those transposing stores would hit one bank per k row; the 16-byte slot of k row kk
// is XOR-swizzled by a constant of kk (sw, sx below: 0..7, so vec4 reads stay whole and conflict-free),
// which spreads each store over all 32 banks. Workgroup memory is double buffered: step t computes from
// buffer t % 2 while step t + 1's tiles go into the other, one barrier per step. Accumulation is f32.
//
// Who loads: with NL loader threads (128 or 256; the default 256) the workgroup has 256 + NL threads and
// the loaders alone touch global memory: during step t they store step t + 1's tiles (loaded during step
// t - 1, held in registers) and then issue step t + 2's loads, so a load's latency and its dequantization
// overlap a whole step of the FMA warps' work (~1.3x the rate of the FMA threads loading, prefetched
// into registers: NL = 0, kept for adapters allowing only 256 invocations, where the FMA loop and the
// load / dequantize / store work add up instead of overlapping).
//
// Split-k (SPLITS > 1, for outputs too narrow to fill the GPU): common/split_k.wgsl. ID: matmul_id's grouped
// GEMM over experts (common/gemm_id_true.wgsl).
//
// Row tiles at or past the step's n_tokens (P) return at once: a short prompt in a 512-row prefill plan
// costs its own rows, not the plan's (the rows past n_tokens are padding, which nothing reads).
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "common/gemm_tile.wgsl"
#include "quant/{{QUANT}}.wgsl"
// WT_ENABLE: "enable f16;" when WT is f16 (hoisted by the preprocessor), else empty
{{WT_ENABLE}}

alias WT = {{WT}};

const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const BM: u32 = 16u * TM;
const BN: u32 = 16u * TN;
const BK: u32 = {{BK}}u;
const SPLITS: u32 = {{SPLITS}}u;
const NL: u32 = {{NL}}u;           // loader threads (0: the 256 FMA threads load too)
const NL1: u32 = max(NL, 1u);
const CPB: u32 = QK / 8u;
const LW: u32 = BK / 8u;          // threads per weight row of a tile (one 8-element chunk each)
const LX: u32 = BK / 4u;          // threads per x row (one vec4 each)
const NWC: u32 = BN * LW;         // weight chunks per tile (<= 256)
const NXC: u32 = BM * LX;         // x vec4s per tile (<= 512)
const XS: u32 = BK * BM / 4u;     // vec4 slots of one x buffer: [k][m / 4]
const WS: u32 = BK * BN / 4u;     // vec4 slots of one weight buffer: [k][n / 4]

var<workgroup> xs: array<vec4<f32>, 2u * XS>;
var<workgroup> ws: array<vec4<WT>, 2u * WS>;

// Slot swizzles of k row kk (0 .. BK-1): a store instruction's lanes cover 32 / L rows of one chunk
// column, i.e. 8 / L slots, and the L chunk columns move to disjoint slot groups.
fn sw(kk: u32) -> u32 { return (kk / 8u) * (8u / LW); }
fn sx(kk: u32) -> u32 { return (kk / 4u) * (8u / LX); }

// Weight chunk c of the tile at (n0, k0): row n0 + c / LW, elements k0 + 8 (c % LW) ..; zero past the ends.
fn load_w(n0: u32, k0: u32, c: u32) -> V8 {
  let n = n0 + c / LW;
  let wc = k0 / 8u + c % LW;
  if (n < D.rows && wc < D.k / 8u) {
    return dq8(w_base + n * D.row_bytes + (wc / CPB) * QB, wc % CPB);
  }
  return V8(vec4<f32>(0.0), vec4<f32>(0.0));
}

fn put_w(buf: u32, c: u32, v: V8) {
  let n = c / LW;
  let kc = c % LW;
  let base = buf * WS + kc * 8u * (BN / 4u) + ((n / 4u) ^ (kc * (8u / LW)));
  let j = n % 4u;
  for (var e = 0u; e < 4u; e++) {
    ws[base + e * (BN / 4u)][j] = WT(v.a[e]);
    ws[base + (4u + e) * (BN / 4u)][j] = WT(v.b[e]);
  }
}

// x vec4 c of the tile at (m0, k0): row m0 + c / LX, elements k0 + 4 (c % LX) ..; zero past the ends.
fn load_x(m0: u32, k0: u32, c: u32) -> vec4<f32> {
  let m = m0 + c / LX;
  let k4 = k0 / 4u + c % LX;
  if (select(m < D.m, x_live(m), ID) && k4 < D.k / 4u) { return X[x_src(m) * (D.k / 4u) + k4]; }
  return vec4<f32>(0.0);
}

fn put_x(buf: u32, c: u32, v: vec4<f32>) {
  let m = c / LX;
  let kq = c % LX;
  let base = buf * XS + kq * 4u * (BM / 4u) + ((m / 4u) ^ (kq * (8u / LX)));
  let j = m % 4u;
  for (var e = 0u; e < 4u; e++) { xs[base + e * (BM / 4u)][j] = v[e]; }
}

// Loader role (NL > 0): loader l (0 .. NL-1) holds weight chunks l + i NL (i < 2) and x vec4s l + i NL
// (i < 4) of a step's tiles in registers between loading and storing them.
struct Stage { w0: V8, w1: V8, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32> }

fn load_stage(m0: u32, n0: u32, k0: u32, l: u32) -> Stage {
  let z8 = V8(vec4<f32>(0.0), vec4<f32>(0.0));
  let z4 = vec4<f32>(0.0);
  var st = Stage(z8, z8, z4, z4, z4, z4);
  // x first: its loads need no arithmetic before the weights' are issued
  if (l < NXC) { st.x0 = load_x(m0, k0, l); }
  if (l + NL1 < NXC) { st.x1 = load_x(m0, k0, l + NL1); }
  if (l + 2u * NL1 < NXC) { st.x2 = load_x(m0, k0, l + 2u * NL1); }
  if (l + 3u * NL1 < NXC) { st.x3 = load_x(m0, k0, l + 3u * NL1); }
  if (l < NWC) { st.w0 = load_w(n0, k0, l); }
  if (l + NL1 < NWC) { st.w1 = load_w(n0, k0, l + NL1); }
  return st;
}

fn put_stage(buf: u32, l: u32, st: Stage) {
  if (l < NXC) { put_x(buf, l, st.x0); }
  if (l + NL1 < NXC) { put_x(buf, l + NL1, st.x1); }
  if (l + 2u * NL1 < NXC) { put_x(buf, l + 2u * NL1, st.x2); }
  if (l + 3u * NL1 < NXC) { put_x(buf, l + 3u * NL1, st.x3); }
  if (l < NWC) { put_w(buf, l, st.w0); }
  if (l + NL1 < NWC) { put_w(buf, l + NL1, st.w1); }
}

@compute @workgroup_size(256u + NL)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = wid.x * BN;
  let m0 = tile_m0(wid.y, BM);
  if (tile_skip(wid.y, m0)) { return; }   // padding rows only, or ID's other tiles (uniform: no barrier skipped)
  let ty = tile_ty(lid);
  let tx = tile_tx(lid);
  // c<r>_<b>: row 4 ty + r (r < 4) or 64 + 4 ty + r - 4, columns 4 tx + 64 b ..; named, not an array, so
  // they stay in registers. With TM or TN 4 the second halves are dead code.
  var c0_0 = vec4<f32>(0.0); var c0_1 = vec4<f32>(0.0);
  var c1_0 = vec4<f32>(0.0); var c1_1 = vec4<f32>(0.0);
  var c2_0 = vec4<f32>(0.0); var c2_1 = vec4<f32>(0.0);
  var c3_0 = vec4<f32>(0.0); var c3_1 = vec4<f32>(0.0);
  var c4_0 = vec4<f32>(0.0); var c4_1 = vec4<f32>(0.0);
  var c5_0 = vec4<f32>(0.0); var c5_1 = vec4<f32>(0.0);
  var c6_0 = vec4<f32>(0.0); var c6_1 = vec4<f32>(0.0);
  var c7_0 = vec4<f32>(0.0); var c7_1 = vec4<f32>(0.0);

  let kr = k_range(wid.z);
  let kbeg = kr.x;
  let steps = select((kr.y - kbeg + BK - 1u) / BK, 0u, tile_dead(wid.y));   // ID's padding pairs: zeros
  var pw = V8(vec4<f32>(0.0), vec4<f32>(0.0));
  var px0 = vec4<f32>(0.0);
  var px1 = vec4<f32>(0.0);
  let l = lid - 256u;              // loader index (loader threads only)
  var st: Stage;
  if (NL > 0u) {
    if (lid >= 256u) {
      put_stage(0u, l, load_stage(m0, n0, kbeg, l));
      if (steps > 1u) { st = load_stage(m0, n0, kbeg + BK, l); }
    }
  } else {
    if (lid < NWC) { put_w(0u, lid, load_w(n0, kbeg, lid)); }
    if (lid < NXC) { put_x(0u, lid, load_x(m0, kbeg, lid)); }
    if (lid + 256u < NXC) { put_x(0u, lid + 256u, load_x(m0, kbeg, lid + 256u)); }
  }
  workgroupBarrier();
  for (var t = 0u; t < steps; t++) {
    let more = t + 1u < steps;
    let k1 = kbeg + (t + 1u) * BK;
    let nb = (t + 1u) % 2u;
    if (NL > 0u && lid >= 256u) {
      // loader warps, while the others run this step's FMAs: store the next step's tiles (loaded during
      // the previous step), then load the one after
      if (more) {
        put_stage(nb, l, st);
        if (t + 2u < steps) { st = load_stage(m0, n0, k1 + BK, l); }
      }
    } else {
      if (NL == 0u && more) {   // the next step's global loads, in flight during the FMAs
        if (lid < NWC) { pw = load_w(n0, k1, lid); }
        if (lid < NXC) { px0 = load_x(m0, k1, lid); }
        if (lid + 256u < NXC) { px1 = load_x(m0, k1, lid + 256u); }
      }
      let xb = (t % 2u) * XS;
      let wb = (t % 2u) * WS;
      for (var kk = 0u; kk < BK; kk++) {
        let xo = xb + kk * (BM / 4u) + (ty ^ sx(kk));
        let wo = wb + kk * (BN / 4u) + (tx ^ sw(kk));
        let x0 = xs[xo];
        let x1 = xs[select(xo, xo + 16u, TM == 8u)];
        let w0 = vec4<f32>(ws[wo]);
        let w1 = vec4<f32>(ws[select(wo, wo + 16u, TN == 8u)]);
        c0_0 += x0.x * w0; c0_1 += x0.x * w1;
        c1_0 += x0.y * w0; c1_1 += x0.y * w1;
        c2_0 += x0.z * w0; c2_1 += x0.z * w1;
        c3_0 += x0.w * w0; c3_1 += x0.w * w1;
        c4_0 += x1.x * w0; c4_1 += x1.x * w1;
        c5_0 += x1.y * w0; c5_1 += x1.y * w1;
        c6_0 += x1.z * w0; c6_1 += x1.z * w1;
        c7_0 += x1.w * w0; c7_1 += x1.w * w1;
      }
      if (NL == 0u && more) {   // buffer nb was last read in step t - 1, before the last barrier
        if (lid < NWC) { put_w(nb, lid, pw); }
        if (lid < NXC) { put_x(nb, lid, px0); }
        if (lid + 256u < NXC) { put_x(nb, lid + 256u, px1); }
      }
    }
    workgroupBarrier();
  }
  if (lid >= 256u) { return; }
  store_tile(wid.z, m0 + 4u * ty, n0 + 4u * tx, c0_0, c0_1, c1_0, c1_1, c2_0, c2_1, c3_0, c3_1,
             c4_0, c4_1, c5_0, c5_1, c6_0, c6_1, c7_0, c7_1);
}
