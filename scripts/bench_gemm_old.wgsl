// Register-tiled GEMM for prefill chunks (R > 32 rows): Y[m, n] = sum_k X[m, k] * W[n, k] (+ bias,
// + residual, multi-output segments: common/matmul_io.wgsl's store), W raw GGUF blocks.
//
// A 256-thread workgroup computes a BM x BN = 64 x 128 tile; thread (ty, tx) = (lid / 16, lid % 16)
// owns rows 4 ty .. 4 ty + 3 and columns 4 tx .. 4 tx + 3 and 64 + 4 tx .. 64 + 4 tx + 3 (a 4 x 8 tile:
// per k, one vec4 of x and two vec4s of W from workgroup memory feed 32 FMAs). Each BK = 32 step
// dequantizes the BN x BK weights once (every element read by the 16 thread rows of the tile) into
// workgroup memory stored k-major as WT (f16 for F16 weights, which it holds exactly, where the adapter
// has shader-f16; f32 otherwise, so results match the f32 numpy backend); x stays f32. The next step's
// global loads are issued before the current step's FMAs (register prefetch), hiding their latency.
// Accumulation is f32.
#include "common/matmul_io.wgsl"
#include "quant/{{QUANT}}.wgsl"
// WT_ENABLE: "enable f16;" when WT is f16 (hoisted by the preprocessor), else empty
{{WT_ENABLE}}

alias WT = {{WT}};

const BM: u32 = 64u;
const BN: u32 = 128u;
const BK: u32 = 32u;
const CPB: u32 = QK / 8u;

var<workgroup> xs: array<vec4<f32>, BK * BM / 4u>;   // [k][m / 4]
var<workgroup> ws: array<vec4<WT>, BK * BN / 4u>;    // [k][n / 4]

// This thread's share of one BK step: two 8-element weight chunks and two x vec4s.
struct Stage { w0: V8, w1: V8, x0: vec4<f32>, x1: vec4<f32> }

// Weight chunk c (0..511) of the tile at k0: row c / 4, elements k0 + 8 (c % 4) ..; zero past the ends.
fn load_w(n0: u32, k0: u32, c: u32) -> V8 {
  let n = n0 + c / 4u;
  let wc = k0 / 8u + c % 4u;
  if (n < D.rows && wc < D.k / 8u) {
    return dq8(n * D.row_bytes + (wc / CPB) * QB, wc % CPB);
  }
  return V8(vec4<f32>(0.0), vec4<f32>(0.0));
}

// x vec4 c (0..511) of the tile at k0: row c / 8, elements k0 + 4 (c % 8) ..
fn load_x(m0: u32, k0: u32, c: u32) -> vec4<f32> {
  let m = m0 + c / 8u;
  let k4 = k0 / 4u + c % 8u;
  if (m < D.m && k4 < D.k / 4u) { return X[m * (D.k / 4u) + k4]; }
  return vec4<f32>(0.0);
}

fn load_stage(m0: u32, n0: u32, k0: u32, lid: u32) -> Stage {
  return Stage(load_w(n0, k0, lid), load_w(n0, k0, lid + 256u), load_x(m0, k0, lid), load_x(m0, k0, lid + 256u));
}

fn put_w(c: u32, v: V8) {
  let n = c / 4u;
  let kb = (c % 4u) * 8u;
  for (var e = 0u; e < 4u; e++) {
    ws[(kb + e) * (BN / 4u) + n / 4u][n % 4u] = WT(v.a[e]);
    ws[(kb + 4u + e) * (BN / 4u) + n / 4u][n % 4u] = WT(v.b[e]);
  }
}

fn put_x(c: u32, v: vec4<f32>) {
  let m = c / 8u;
  let kb = (c % 8u) * 4u;
  for (var e = 0u; e < 4u; e++) { xs[(kb + e) * (BM / 4u) + m / 4u][m % 4u] = v[e]; }
}

fn store_row(m: u32, n: u32, v0: vec4<f32>, v1: vec4<f32>) {
  if (m >= D.m) { return; }
  for (var j = 0u; j < 4u; j++) {
    if (n + j < D.rows) { store(m, D.col0 + n + j, v0[j]); }
    if (n + 64u + j < D.rows) { store(m, D.col0 + n + 64u + j, v1[j]); }
  }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = wid.x * BN;
  let m0 = wid.y * BM;
  let tx = lid % 16u;
  let ty = lid / 16u;
  // c<row><half>: row 4 ty + row, columns 4 tx .. (half 0) and 64 + 4 tx .. (half 1); named, not an
  // array, so they stay in registers
  var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0);
  var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
  var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0);
  var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
  var st = load_stage(m0, n0, 0u, lid);
  for (var k0 = 0u; k0 < D.k; k0 += BK) {
    workgroupBarrier();     // the previous step's reads are done
    put_w(lid, st.w0);
    put_w(lid + 256u, st.w1);
    put_x(lid, st.x0);
    put_x(lid + 256u, st.x1);
    workgroupBarrier();
    if (k0 + BK < D.k) { st = load_stage(m0, n0, k0 + BK, lid); }
    for (var kk = 0u; kk < BK; kk++) {
      let xv = xs[kk * (BM / 4u) + ty];
      let w0 = vec4<f32>(ws[kk * (BN / 4u) + tx]);
      let w1 = vec4<f32>(ws[kk * (BN / 4u) + 16u + tx]);
      c00 += xv.x * w0; c01 += xv.x * w1;
      c10 += xv.y * w0; c11 += xv.y * w1;
      c20 += xv.z * w0; c21 += xv.z * w1;
      c30 += xv.w * w0; c31 += xv.w * w1;
    }
  }
  let m = m0 + 4u * ty;
  let n = n0 + 4u * tx;
  store_row(m, n, c00, c01);
  store_row(m + 1u, n, c10, c11);
  store_row(m + 2u, n, c20, c21);
  store_row(m + 3u, n, c30, c31);
}
