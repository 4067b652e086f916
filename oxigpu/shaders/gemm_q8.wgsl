// Prefill GEMM by integer dots (adapters with Device.int8_dots; ops/gemm.py): Y[m, n] = sum_k x[m, k] W[n, k]
// (+ bias, + residual, multi-output segments: common/matmul_io.wgsl's store) with x rounded to int8 per 32
// consecutive k (gemm_xq.wgsl, one scale each, as llama.cpp's q8_1 activations) and W kept as its
// integer quants (gemm_q8/<type>.wgsl: 32 int8 per sub-block and its scale, plus a min for Q4_K). What
// llama.cpp's MMQ does without tensor cores: per 32 k (16 for Q6_K's scales) every output takes 8 (4)
// dot4I8Packed into an int sum, then one float step acc += (dx dw) isum (- dx sum(qx) mw for mins).
// Against the f32 kernel (gemm_tiled.wgsl) a workgroup-memory vec4 read carries 4 k values of its 4 rows
// (or columns) instead of 1, and one instruction does 4 multiply-adds.
//
// Tiles as gemm_tiled.wgsl: BM x BN = 16 TM x 16 TN outputs, 256 compute threads (common/gemm_tile.wgsl
// mapping), double-buffered k-major tiles in workgroup memory (here 32-bit words of 4 int8 along k, no
// swizzle: a loader lane stores one word per k row, lanes on consecutive rows), one barrier per step of
// BK = 32 NB inner elements, NL loader threads (0: the compute threads load one step ahead; 128 or 256:
// the loaders store step t + 1 and load step t + 2 during step t). The int sums start at 1.5 * 2^23 in
// float bits, so a bitcast and one subtraction turn them into f32 (|isum| < 2^22: 32 products of int8
// with <= 127 weights), with no int-to-float conversion.
//
// Rows at or past the step's n_tokens read as zero (their x was not quantized); row tiles wholly past it
// return at once. Split-k: common/split_k.wgsl. ID: matmul_id's grouped GEMM over experts (common/gemm_id_true.wgsl).
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "common/gemm_tile.wgsl"
#include "gemm_q8/q32.wgsl"
#include "gemm_q8/{{QUANT}}.wgsl"

@group(0) @binding(6) var<storage, read> XQB: array<vec4<u32>>;   // [m][k / 16]: 16 int8 of x each
@group(0) @binding(8) var<storage, read> XDB: array<vec2<f32>>;   // [m][k / 32]: (d, d * sum of the int8)

const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const BM: u32 = 16u * TM;
const BN: u32 = 16u * TN;
const NB: u32 = {{NB}}u;          // 32-element blocks per step
const BK: u32 = 32u * NB;
const SPLITS: u32 = {{SPLITS}}u;
const NL: u32 = {{NL}}u;          // loader threads (0: the 256 compute threads load too)
const LT: u32 = {{LT}}u;          // threads that load: NL, or 256
const KW: u32 = BK / 4u;          // k words (4 int8) per step
const NF: u32 = BK / FK;          // weight scales per row per step (FK: gemm_q8/<type>.wgsl)
const XU: u32 = BM * BK / 16u;    // x vec4s per step
const DU: u32 = BM * NB;          // x scales per step
const WU: u32 = BN * NB;          // weight sub-blocks per step
const IC: i32 = 0x4B400000;       // 1.5 * 2^23 as f32 bits
const MINS: u32 = max(2u * HM * NB * BM / 4u, 1u);

var<workgroup> xs: array<vec4<u32>, 2u * KW * BM / 4u>;   // [buf][k word][m / 4]
var<workgroup> xd: array<vec4<f32>, 2u * NB * BM / 4u>;   // [buf][block][m / 4]: x scales
var<workgroup> xm: array<vec4<f32>, MINS>;                // [buf][block][m / 4]: x scale * int sum (HM)
var<workgroup> ws: array<vec4<u32>, 2u * KW * BN / 4u>;   // [buf][k word][n / 4]
var<workgroup> wd: array<vec4<f32>, 2u * NF * BN / 4u>;   // [buf][FK group][n / 4]: weight scales
var<workgroup> wm: array<vec4<f32>, max(2u * HM * NB * BN / 4u, 1u)>;   // [buf][block][n / 4]: mins (HM)

// Weight sub-block u of the step at (n0, k0): row n0 + u % BN, 32-block k0 / 32 + u / BN; zero past the ends.
fn load_w(n0: u32, k0: u32, u: u32) -> Q32 {
  return q32_at(n0 + u % BN, k0 / 32u + u / BN);
}

fn put_w(buf: u32, u: u32, q: Q32) {
  let n = u % BN;
  let b = u / BN;
  let base = (buf * KW + 8u * b) * (BN / 4u) + n / 4u;
  let j = n % 4u;
  for (var e = 0u; e < 4u; e++) {
    ws[base + e * (BN / 4u)][j] = q.lo[e];
    ws[base + (4u + e) * (BN / 4u)][j] = q.hi[e];
  }
  let f = (buf * NF + b * (32u / FK)) * (BN / 4u) + n / 4u;
  wd[f][j] = q.a;
  if (FK == 16u) { wd[f + BN / 4u][j] = q.b; }
  if (HM == 1u) { wm[(buf * NB + b) * (BN / 4u) + n / 4u][j] = q.b; }
}

// Whether row m of x is real (not past the chunk or the step's tokens).
fn x_row(m: u32) -> bool { return x_live(m); }

// x vec4 u of the step at (m0, k0): row m0 + u % BM, 16 int8 from k0 + 16 (u / BM).
fn load_x(m0: u32, k0: u32, u: u32) -> vec4<u32> {
  let m = m0 + u % BM;
  let c = k0 / 16u + u / BM;
  if (x_row(m) && c < D.k / 16u) { return XQB[x_src(m) * (D.k / 16u) + c]; }
  return vec4<u32>(0u);
}

fn put_x(buf: u32, u: u32, v: vec4<u32>) {
  let m = u % BM;
  let base = (buf * KW + 4u * (u / BM)) * (BM / 4u) + m / 4u;
  for (var e = 0u; e < 4u; e++) { xs[base + e * (BM / 4u)][m % 4u] = v[e]; }
}

// x scale u of the step: row m0 + u % BM, block k0 / 32 + u / BM.
fn load_d(m0: u32, k0: u32, u: u32) -> vec2<f32> {
  let m = m0 + u % BM;
  let j = k0 / 32u + u / BM;
  if (x_row(m) && j < D.k / 32u) { return XDB[x_src(m) * (D.k / 32u) + j]; }
  return vec2<f32>(0.0);
}

fn put_d(buf: u32, u: u32, v: vec2<f32>) {
  let i = (buf * NB + u / BM) * (BM / 4u) + (u % BM) / 4u;
  xd[i][u % 4u] = v.x;
  if (HM == 1u) { xm[i][u % 4u] = v.y; }
}

// One step's tiles in a loading thread's registers (thread l holds units l + i LT of each kind).
struct Stage {
  w0: Q32, w1: Q32,
  x0: vec4<u32>, x1: vec4<u32>, x2: vec4<u32>, x3: vec4<u32>,
  d0: vec2<f32>, d1: vec2<f32>,
}

fn load_stage(m0: u32, n0: u32, k0: u32, l: u32) -> Stage {
  let zw = Q32(vec4<u32>(0u), vec4<u32>(0u), 0.0, 0.0);
  var st = Stage(zw, zw, vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), vec2<f32>(0.0), vec2<f32>(0.0));
  if (l < XU) { st.x0 = load_x(m0, k0, l); }
  if (l + LT < XU) { st.x1 = load_x(m0, k0, l + LT); }
  if (l + 2u * LT < XU) { st.x2 = load_x(m0, k0, l + 2u * LT); }
  if (l + 3u * LT < XU) { st.x3 = load_x(m0, k0, l + 3u * LT); }
  if (l < DU) { st.d0 = load_d(m0, k0, l); }
  if (l + LT < DU) { st.d1 = load_d(m0, k0, l + LT); }
  if (l < WU) { st.w0 = load_w(n0, k0, l); }
  if (l + LT < WU) { st.w1 = load_w(n0, k0, l + LT); }
  return st;
}

fn put_stage(buf: u32, l: u32, st: Stage) {
  if (l < XU) { put_x(buf, l, st.x0); }
  if (l + LT < XU) { put_x(buf, l + LT, st.x1); }
  if (l + 2u * LT < XU) { put_x(buf, l + 2u * LT, st.x2); }
  if (l + 3u * LT < XU) { put_x(buf, l + 3u * LT, st.x3); }
  if (l < DU) { put_d(buf, l, st.d0); }
  if (l + LT < DU) { put_d(buf, l + LT, st.d1); }
  if (l < WU) { put_w(buf, l, st.w0); }
  if (l + LT < WU) { put_w(buf, l + LT, st.w1); }
}

// The integer dots of one x word (4 int8 of a row) with the words of 4 columns.
fn d4(x: u32, w: vec4<u32>) -> vec4<i32> {
  return vec4<i32>(dot4I8Packed(x, w.x), dot4I8Packed(x, w.y), dot4I8Packed(x, w.z), dot4I8Packed(x, w.w));
}

// Accumulator c plus the int sums i (biased by IC) of one FK group, for one row (x scale dx, dx * sum
// of its int8 sx) and 4 columns (weight scales dw, mins mw).
fn fl(c: vec4<f32>, i: vec4<i32>, dx: f32, sx: f32, dw: vec4<f32>, mw: vec4<f32>) -> vec4<f32> {
  var r = c + (dx * dw) * (bitcast<vec4<f32>>(i) - 12582912.0);
  if (HM == 1u) { r -= sx * mw; }
  return r;
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
  let loader = NL > 0u && lid >= 256u;
  let l = select(lid, lid - 256u, NL > 0u);    // loading-thread index
  var st: Stage;
  if (NL == 0u || loader) {
    put_stage(0u, l, load_stage(m0, n0, kbeg, l));
    if (NL > 0u && steps > 1u) { st = load_stage(m0, n0, kbeg + BK, l); }
  }
  workgroupBarrier();
  for (var t = 0u; t < steps; t++) {
    let more = t + 1u < steps;
    let k1 = kbeg + (t + 1u) * BK;
    let nb = (t + 1u) % 2u;
    if (loader) {
      // loader warps, while the others compute: store the next step's tiles (loaded during the previous
      // step), then load the one after
      if (more) {
        put_stage(nb, l, st);
        if (t + 2u < steps) { st = load_stage(m0, n0, k1 + BK, l); }
      }
    } else {
      if (NL == 0u && more) { st = load_stage(m0, n0, k1, l); }   // in flight during the dots
      let xb = (t % 2u) * KW * (BM / 4u);
      let wb = (t % 2u) * KW * (BN / 4u);
      for (var f = 0u; f < NF; f++) {
        var i0_0 = vec4<i32>(IC); var i0_1 = vec4<i32>(IC);
        var i1_0 = vec4<i32>(IC); var i1_1 = vec4<i32>(IC);
        var i2_0 = vec4<i32>(IC); var i2_1 = vec4<i32>(IC);
        var i3_0 = vec4<i32>(IC); var i3_1 = vec4<i32>(IC);
        var i4_0 = vec4<i32>(IC); var i4_1 = vec4<i32>(IC);
        var i5_0 = vec4<i32>(IC); var i5_1 = vec4<i32>(IC);
        var i6_0 = vec4<i32>(IC); var i6_1 = vec4<i32>(IC);
        var i7_0 = vec4<i32>(IC); var i7_1 = vec4<i32>(IC);
        for (var kw = f * (FK / 4u); kw < (f + 1u) * (FK / 4u); kw++) {
          let xo = xb + kw * (BM / 4u) + ty;
          let wo = wb + kw * (BN / 4u) + tx;
          let x0 = xs[xo];
          let x1 = xs[select(xo, xo + 16u, TM == 8u)];
          let w0 = ws[wo];
          let w1 = ws[select(wo, wo + 16u, TN == 8u)];
          i0_0 += d4(x0.x, w0); i0_1 += d4(x0.x, w1);
          i1_0 += d4(x0.y, w0); i1_1 += d4(x0.y, w1);
          i2_0 += d4(x0.z, w0); i2_1 += d4(x0.z, w1);
          i3_0 += d4(x0.w, w0); i3_1 += d4(x0.w, w1);
          i4_0 += d4(x1.x, w0); i4_1 += d4(x1.x, w1);
          i5_0 += d4(x1.y, w0); i5_1 += d4(x1.y, w1);
          i6_0 += d4(x1.z, w0); i6_1 += d4(x1.z, w1);
          i7_0 += d4(x1.w, w0); i7_1 += d4(x1.w, w1);
        }
        let xi = ((t % 2u) * NB + f * FK / 32u) * (BM / 4u) + ty;
        let dx0 = xd[xi];
        let dx1 = xd[select(xi, xi + 16u, TM == 8u)];
        var sx0 = vec4<f32>(0.0);
        var sx1 = vec4<f32>(0.0);
        let wi = ((t % 2u) * NF + f) * (BN / 4u) + tx;
        let dw0 = wd[wi];
        let dw1 = wd[select(wi, wi + 16u, TN == 8u)];
        var mw0 = vec4<f32>(0.0);
        var mw1 = vec4<f32>(0.0);
        if (HM == 1u) {
          sx0 = xm[xi];
          sx1 = xm[select(xi, xi + 16u, TM == 8u)];
          let mi = ((t % 2u) * NB + f * FK / 32u) * (BN / 4u) + tx;
          mw0 = wm[mi];
          mw1 = wm[select(mi, mi + 16u, TN == 8u)];
        }
        c0_0 = fl(c0_0, i0_0, dx0.x, sx0.x, dw0, mw0); c0_1 = fl(c0_1, i0_1, dx0.x, sx0.x, dw1, mw1);
        c1_0 = fl(c1_0, i1_0, dx0.y, sx0.y, dw0, mw0); c1_1 = fl(c1_1, i1_1, dx0.y, sx0.y, dw1, mw1);
        c2_0 = fl(c2_0, i2_0, dx0.z, sx0.z, dw0, mw0); c2_1 = fl(c2_1, i2_1, dx0.z, sx0.z, dw1, mw1);
        c3_0 = fl(c3_0, i3_0, dx0.w, sx0.w, dw0, mw0); c3_1 = fl(c3_1, i3_1, dx0.w, sx0.w, dw1, mw1);
        c4_0 = fl(c4_0, i4_0, dx1.x, sx1.x, dw0, mw0); c4_1 = fl(c4_1, i4_1, dx1.x, sx1.x, dw1, mw1);
        c5_0 = fl(c5_0, i5_0, dx1.y, sx1.y, dw0, mw0); c5_1 = fl(c5_1, i5_1, dx1.y, sx1.y, dw1, mw1);
        c6_0 = fl(c6_0, i6_0, dx1.z, sx1.z, dw0, mw0); c6_1 = fl(c6_1, i6_1, dx1.z, sx1.z, dw1, mw1);
        c7_0 = fl(c7_0, i7_0, dx1.w, sx1.w, dw0, mw0); c7_1 = fl(c7_1, i7_1, dx1.w, sx1.w, dw1, mw1);
      }
      if (NL == 0u && more) { put_stage(nb, l, st); }   // buffer nb was last read in step t - 1
    }
    workgroupBarrier();
  }
  if (lid >= 256u) { return; }
  store_tile(wid.z, m0 + 4u * ty, n0 + 4u * tx, c0_0, c0_1, c1_0, c1_1, c2_0, c2_1, c3_0, c3_1,
             c4_0, c4_1, c5_0, c5_1, c6_0, c6_1, c7_0, c7_1);
}
