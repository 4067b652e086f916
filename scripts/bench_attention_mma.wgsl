// Prefill attention on the matrix units (Dawn's subgroup matrices), for scripts/bench_attention_mma.py:
// the experiment that decides whether shaders/attention.wgsl (FMA, ~15 TFLOP/s on the 8B's 512-token
// chunk) should get a matrix-unit twin. Causal, no window, no soft cap; head dims D, DV multiples of 16,
// at most 128. Same bindings and row order as attention.wgsl: query rows rg = t * G + g of KV head kvh.
//
// A workgroup of 4 subgroups takes BQ = 64 rows (16 per subgroup) and walks the keys they can see in
// tiles of BK = 64, staged as f16 in workgroup memory (zero past the block's keys: cache rows there may
// be NaN). The result matrices cannot be rescaled row by row, so there is no online softmax: pass 1
// computes S = Q K^T per tile and each row's maximum; pass 2 computes S again, P = exp(S - max) (masked
// to 0), the row sums, and O += P V with P as f16 through workgroup memory. QK^T twice, PV once: 1.5x the
// FLOPs of one pass, all of them on the matrix units. The scores go through workgroup memory (ss) for the
// per-row work: lane e of a subgroup owns row e / 2, keys 32 (e % 2) .. of the tile.
// Defines: D, DV, G, NH, NKV, T, SCALE, PRB (row blocks per KV head), and the generated blocks QLOAD,
// SDECL, S_MMA, S_STORE, ODECL, PV_MMA, O_OUT (scripts/bench_attention_mma.py).
diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> cache_k: array<u32>;   // [pos][NKV][D] halves, in pairs
@group(0) @binding(3) var<storage, read> cache_v: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const G: u32 = {{G}}u;
const NH: u32 = {{NH}}u;
const NKV: u32 = {{NKV}}u;
const ROWS: u32 = {{T}}u * G;
const SCALE: f32 = {{SCALE}};
const PRB: u32 = {{PRB}}u;
const BQ: u32 = 64u;
const BK: u32 = 64u;
const WG: u32 = 128u;
const LD: u32 = max(D, DV) + 8u;   // halves per staged row (8 of padding)
const SL: u32 = BK + 4u;           // f32 per score row
const PL: u32 = BK + 8u;           // halves per probability row
const NEG: f32 = -3.0e38;

var<workgroup> kv: array<f16, BQ * LD>;   // the Q tile first, then each K and V tile, [row or key][d]
var<workgroup> ss: array<f32, BQ * SL>;   // scores, then O blocks on their way out, [row][key]
var<workgroup> ps: array<f16, BQ * PL>;   // probabilities [row][key]

// The K tile (V: the V tile) from key k0 into kv, zero at or past hi: word units, so a subgroup's loads
// lie side by side along a key's row and its stores hit consecutive words.
fn stage(k0: u32, hi: u32, kvh: u32, lid: u32, V: bool) {
  let W = select(D, DV, V) / 2u;   // words per key row
  for (var u = lid; u < BK * W; u += WG) {
    let j = k0 + u / W;
    var v = 0u;
    if (j < hi) {
      let i = (j * NKV + kvh) * W + u % W;
      if (V) { v = cache_v[i]; } else { v = cache_k[i]; }
    }
    let h = bitcast<vec2<f16>>(v);
    let o = (u / W) * LD + 2u * (u % W);
    kv[o] = h.x; kv[o + 1u] = h.y;
  }
}

// Whether query row rg sees key j (causal; padding rows see nothing).
fn visible(rg: u32, j: u32) -> bool {
  let t = rg / G;
  return rg < ROWS && t < P.n_tokens && j <= P.pos + t;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let w = wid.x;
  if (w >= PRB * NKV) { return; }
  let rb = PRB - 1u - w / NKV;     // the longest row blocks first
  let kvh = w % NKV;
  let rg0 = rb * BQ;
  if (rg0 / G >= P.n_tokens) { return; }   // padding rows only (uniform)
  let t_last = min((rg0 + BQ - 1u) / G, min({{T}}u, P.n_tokens) - 1u);
  let hi = P.pos + t_last + 1u;             // keys [0, hi) cover every row of the block
  let sg = lid / 32u;
  let e = lid % 32u;
  let row = 16u * sg + e / 2u;              // this lane's row of the block, keys 32 (e % 2) ..
  let rg = rg0 + row;
  let c0 = 32u * (e % 2u);

  // Q tile (times SCALE) as f16 into kv, then each subgroup's 16 rows into registers.
  for (var u = lid; u < BQ * D; u += WG) {
    let r = rg0 + u / D;
    let t = r / G;
    var v = 0.0;
    if (r < ROWS && t < P.n_tokens) { v = q[(t * NH + (kvh * G + r % G)) * D + u % D] * SCALE; }
    kv[(u / D) * LD + u % D] = f16(v);
  }
  workgroupBarrier();
{{QLOAD}}
  workgroupBarrier();

  // pass 1: each row's maximum score
  var m = NEG;
  for (var k0 = 0u; k0 < hi; k0 += BK) {
    stage(k0, hi, kvh, lid, false);
    workgroupBarrier();
{{SDECL}}
{{S_MMA}}
{{S_STORE}}
    workgroupBarrier();
    for (var c = c0; c < c0 + 32u; c++) {
      if (visible(rg, k0 + c)) { m = max(m, ss[row * SL + c]); }
    }
    workgroupBarrier();
  }
  m = max(m, subgroupShuffleXor(m, 1u));

  // pass 2: P = exp(S - m), its row sums, O += P V
  var l = 0.0;
{{ODECL}}
  for (var k0 = 0u; k0 < hi; k0 += BK) {
    stage(k0, hi, kvh, lid, false);
    workgroupBarrier();
{{SDECL}}
{{S_MMA}}
{{S_STORE}}
    workgroupBarrier();
    for (var c = c0; c < c0 + 32u; c++) {
      var p = 0.0;
      if (visible(rg, k0 + c)) { p = exp(ss[row * SL + c] - m); }
      let ph = f16(p);
      l += f32(ph);                         // the sum of what PV multiplies
      ps[row * PL + c] = ph;
    }
    stage(k0, hi, kvh, lid, true);    // every K fragment was read before the barrier above
    workgroupBarrier();
{{PV_MMA}}
    workgroupBarrier();
  }
  l += subgroupShuffleXor(l, 1u);

  // O / l to dst, 4 blocks of 16 x 16 at a time through this subgroup's rows of ss
  let t = rg / G;
  let live = rg < ROWS && t < P.n_tokens;
  let h = kvh * G + rg % G;
{{O_OUT}}
}
