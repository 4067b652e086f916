// Mixture-of-experts GEMM, for prefill: the (token, slot) pairs are grouped by expert so each expert's
// weight tile is read once per TM pairs, not once per pair.
// route (one workgroup): count the pairs per expert, lay them out expert by expert in `order`, and cut
// each expert's run into tiles of at most TM pairs: R[0] = number of tiles, R[1 + 3i ..] = (expert, first
// index into order, count) of tile i, order at R[ORDER_AT ..]. Padded pairs (t >= n_tokens) go to a last
// pseudo-expert E whose tiles write zeros. The order within a run varies from run to run; each pair's
// output does not depend on it.
// gemm: workgroup (column block, tile): y[p*N + r] = W[e][r] . x_p for the tile's pairs p and TN rows r,
// BK elements of k at a time through workgroup memory. Tiles past R[0] return at once.
// Defines: QUANT, K_IN (multiple of BK), N, E, KSEL, XSLOT, T, MAX_TILES, ORDER_AT.
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read> ids: array<i32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> R: array<u32>;

#include "quant/{{QUANT}}.wgsl"

const TM: u32 = 16u;
const TN: u32 = 64u;
const BK: u32 = 32u;
const ROW_BYTES: u32 = {{K_IN}}u / QK * QB;

var<workgroup> counts: array<atomic<u32>, {{E}} + 1>;
var<workgroup> starts: array<u32, {{E}} + 1>;

fn expert_of(p: u32, n_pairs: u32) -> u32 {
  if (p >= n_pairs) { return {{E}}u; }
  return min(u32(max(ids[p], 0)), {{E}}u - 1u);
}

@compute @workgroup_size(256)
fn route(@builtin(local_invocation_index) lid: u32) {
  for (var e = lid; e <= {{E}}u; e += 256u) { atomicStore(&counts[e], 0u); }
  workgroupBarrier();
  let n_pairs = min(P.n_tokens, {{T}}u) * {{KSEL}}u;
  for (var p = lid; p < {{T}}u * {{KSEL}}u; p += 256u) { atomicAdd(&counts[expert_of(p, n_pairs)], 1u); }
  workgroupBarrier();
  if (lid == 0u) {
    var run = 0u;
    var nt = 0u;
    for (var e = 0u; e <= {{E}}u; e++) {
      let c = atomicLoad(&counts[e]);
      starts[e] = run;
      for (var off = 0u; off < c && nt < {{MAX_TILES}}u; off += TM) {
        R[1u + 3u * nt] = e;
        R[2u + 3u * nt] = run + off;
        R[3u + 3u * nt] = min(TM, c - off);
        nt++;
      }
      run += c;
      atomicStore(&counts[e], 0u);
    }
    R[0] = nt;
  }
  workgroupBarrier();
  for (var p = lid; p < {{T}}u * {{KSEL}}u; p += 256u) {
    let e = expert_of(p, n_pairs);
    let slot = atomicAdd(&counts[e], 1u);
    R[{{ORDER_AT}}u + starts[e] + slot] = p;
  }
}

var<workgroup> xs: array<f32, TM * BK>;
var<workgroup> ws: array<f32, TN * BK>;
var<workgroup> n_tiles: u32;

@compute @workgroup_size(256)
fn gemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let tile = wid.y;
  if (lid == 0u) { n_tiles = R[0]; }
  if (tile >= workgroupUniformLoad(&n_tiles)) { return; }   // the whole workgroup, so barriers stay uniform
  let e = R[1u + 3u * tile];
  let first = R[2u + 3u * tile];
  let count = R[3u + 3u * tile];
  let n0 = wid.x * TN;
  let ebase = e * {{N}}u * ROW_BYTES;
  // loaders: W row lr (chunk lc of BK/8), x pair xm (vec4 xq of BK/4)
  let lr = lid / (BK / 8u);
  let lc = lid % (BK / 8u);
  let xm = lid / (BK / 4u);
  let xq = lid % (BK / 4u);
  var xp = 0u;
  let x_live = xm < count;
  if (x_live) {
    let p = R[{{ORDER_AT}}u + first + xm];
    xp = select(p / {{KSEL}}u, p, {{XSLOT}}u == 1u) * ({{K_IN}}u / 4u);
  }
  // compute: pair tm, rows tn .. tn+3
  let tm = lid / (TN / 4u);
  let tn = (lid % (TN / 4u)) * 4u;
  var acc = vec4<f32>(0.0);
  for (var k0 = 0u; k0 < {{K_IN}}u; k0 += BK) {
    let row = n0 + lr;
    var v = V8(vec4<f32>(0.0), vec4<f32>(0.0));
    if (row < {{N}}u && e < {{E}}u) {
      let el = k0 + lc * 8u;
      v = dq8(ebase + row * ROW_BYTES + (el / QK) * QB, (el % QK) / 8u);
    }
    for (var i = 0u; i < 4u; i++) {
      ws[lr * BK + lc * 8u + i] = v.a[i];
      ws[lr * BK + lc * 8u + 4u + i] = v.b[i];
    }
    if (lid < TM * BK / 4u) {
      var xv = vec4<f32>(0.0);
      if (x_live) { xv = x[xp + k0 / 4u + xq]; }
      for (var i = 0u; i < 4u; i++) { xs[xm * BK + xq * 4u + i] = xv[i]; }
    }
    workgroupBarrier();
    for (var k = 0u; k < BK; k++) {
      let xv = xs[tm * BK + k];
      acc += xv * vec4<f32>(ws[tn * BK + k], ws[(tn + 1u) * BK + k], ws[(tn + 2u) * BK + k],
                            ws[(tn + 3u) * BK + k]);
    }
    workgroupBarrier();
  }
  if (tm < count) {
    let p = R[{{ORDER_AT}}u + first + tm];
    for (var i = 0u; i < 4u; i++) {
      let row = n0 + tn + i;
      if (row < {{N}}u) { y[p * {{N}}u + row] = acc[i]; }
    }
  }
}
