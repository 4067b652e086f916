// Tiled GEMM for prefill: Y[m, n] = sum_k X[m, k] * W[n, k] (+ bias), W raw GGUF blocks.
// A 256-thread workgroup computes a BM x BN tile; per BK step it dequantizes BN x BK weights (one
// 8-element chunk per thread) and copies BM x BK of x into workgroup memory, then each thread
// accumulates a TM x TN micro-tile (rows ty + 16 i, columns tx + 16 j). Row tiles at or past the step's
// n_tokens (padding) return at once.
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "quant/{{QUANT}}.wgsl"

const BM: u32 = 32u;
const BN: u32 = 64u;
const BK: u32 = 32u;
const TM: u32 = BM / 16u;
const TN: u32 = BN / 16u;
const CPB: u32 = QK / 8u;

var<workgroup> xs: array<vec4<f32>, BM * BK / 4u>;       // [m][k/4]
var<workgroup> ws: array<f32, BN * (BK + 1u)>;           // [n][k], padded row

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = wid.x * BN;
  let m0 = wid.y * BM;
  if (m0 >= P.n_tokens) { return; }
  let tx = lid % 16u;
  let ty = lid / 16u;
  let kv4 = D.k / 4u;
  var acc: array<array<f32, TN>, TM>;
  for (var k0 = 0u; k0 < D.k; k0 += BK) {
    // weight tile: thread -> (row lid / 4, chunk lid % 4)
    let wn = lid / 4u;
    let wc = k0 / 8u + lid % 4u;
    var v = V8(vec4<f32>(0.0), vec4<f32>(0.0));
    if (n0 + wn < D.rows && wc < D.k / 8u) {
      v = dq8((n0 + wn) * D.row_bytes + (wc / CPB) * QB, wc % CPB);
    }
    let wb = wn * (BK + 1u) + (lid % 4u) * 8u;
    for (var i = 0u; i < 4u; i++) { ws[wb + i] = v.a[i]; ws[wb + 4u + i] = v.b[i]; }
    // x tile: thread -> (row lid / 8, vec4 lid % 8)
    let xm = m0 + lid / 8u;
    let xk = k0 / 4u + lid % 8u;
    var xv = vec4<f32>(0.0);
    if (xm < D.m && xk < kv4) { xv = X[xm * kv4 + xk]; }
    xs[lid] = xv;
    workgroupBarrier();
    for (var kk = 0u; kk < BK / 4u; kk++) {
      var xr: array<vec4<f32>, TM>;
      for (var i = 0u; i < TM; i++) { xr[i] = xs[(ty + 16u * i) * (BK / 4u) + kk]; }
      for (var j = 0u; j < TN; j++) {
        let wo = (tx + 16u * j) * (BK + 1u) + kk * 4u;
        let wv = vec4<f32>(ws[wo], ws[wo + 1u], ws[wo + 2u], ws[wo + 3u]);
        for (var i = 0u; i < TM; i++) { acc[i][j] += dot(xr[i], wv); }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < TM; i++) {
    let m = m0 + ty + 16u * i;
    for (var j = 0u; j < TN; j++) {
      let n = n0 + tx + 16u * j;
      if (m < D.m && n < D.rows) {
        store(m, D.col0 + n, acc[i][j]);
      }
    }
  }
}
