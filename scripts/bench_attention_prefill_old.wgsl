// Prefill attention (T > 1; QK^T, masked online softmax, V) over the KV cache. Decode (T == 1), and
// prefill where no tile fits the workgroup memory, run attention_decode.wgsl.
//
// The query rows of one KV head are the (t, g) pairs of the chunk flattened as rg = t * G + g (GQA: query
// head h = kvh * G + g reads KV head kvh), so K/V tiles are read once for every query head that shares
// them. Rows of padded tokens (t >= n_tokens) see no keys and write zeros; keys outside a row's
// causal/window range get no weight, and no thread reads cache rows at or beyond pos + n_tokens.
// Only workgroup memory and barriers: no subgroup feature needed.
//
// Defines: D, DV (head dims, multiples of 4), G, NH, NKV, T, SCALE, SOFTCAP (0: none), WINDOW (0: none),
// and the prefill tile's below.
#include "common/params.wgsl"
#include "math.wgsl"

@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> cache_k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> cache_v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> dst: array<vec4<f32>>;

const D4: u32 = {{D}}u / 4u;
const DV4: u32 = {{DV}}u / 4u;

struct Row { t: u32, h: u32, live: bool }

// Query row rg (= t * G + g) of KV head kvh.
fn row_of(rg: u32, kvh: u32) -> Row {
  let t = rg / {{G}}u;
  return Row(t, kvh * {{G}}u + rg % {{G}}u, rg < {{T}}u * {{G}}u && t < P.n_tokens);
}

fn key_visible(j: u32, p: u32) -> bool {
  return j <= p && ({{WINDOW}}u == 0u || j + {{WINDOW}}u > p);
}

// Keys any live row of the n rows from rg0 can see: [lo, hi). Empty when every row is padding.
fn key_range(rg0: u32, n: u32) -> vec2<u32> {
  let t_first = rg0 / {{G}}u;
  if (t_first >= P.n_tokens) { return vec2<u32>(0u); }
  let t_last = min((rg0 + n - 1u) / {{G}}u, min({{T}}u, P.n_tokens) - 1u);
  var lo = 0u;
  if ({{WINDOW}}u > 0u && P.pos + t_first + 1u > {{WINDOW}}u) { lo = P.pos + t_first + 1u - {{WINDOW}}u; }
  return vec2<u32>(lo, P.pos + t_last + 1u);
}

// ---- Prefill (T > 1): flash attention with K/V tiles in workgroup memory.
// A 128-thread workgroup takes BQ consecutive query rows of one KV head (rows as above) and walks
// the keys they can see in tiles of BK: the K tile is loaded coalesced, every (row, key) score of the
// tile computed from workgroup memory (thread: one key, RPT rows), the softmax statistics reduced over
// the FPR threads of each row, then the V tile replaces the K tile and each thread adds P V to its
// NACC (row, vec4) accumulators. Rows of padded tokens write zeros; cache rows at or past
// pos + n_tokens are never read (loads past the block's range are zero-filled).
// Defines (besides D, DV, G, NH, NKV, T, SCALE, SOFTCAP, WINDOW): BQ, BK, PRB (row blocks per KV
// head), KS (vec4 stride of a K/V tile row: max(D4, DV4) + 1, odd, so lanes reading consecutive keys
// hit distinct banks), PACC (ceil(BQ * DV4 / 128)).
const BQ: u32 = {{BQ}}u;
const BK: u32 = {{BK}}u;
const NG: u32 = 128u / BK;         // score threads per key: rows rq, rq + NG, ...
const RPT: u32 = BQ / NG;          // rows per score thread
const FPR: u32 = 128u / BQ;        // softmax threads per row
const KPT: u32 = BK / FPR;         // keys per softmax thread
const KS: u32 = {{KS}}u;

var<workgroup> fq: array<vec4<f32>, BQ * D4>;
var<workgroup> fkv: array<vec4<f32>, BK * KS>;   // the K tile, then the V tile
var<workgroup> fs: array<f32, BQ * BK>;          // scores, then probabilities
var<workgroup> fmax: array<f32, 128>;            // per-thread partial max / sum of its KPT keys
var<workgroup> fsum: array<f32, 128>;
var<workgroup> fm: array<f32, BQ>;               // running max and sum per row
var<workgroup> fl: array<f32, BQ>;

// Zero-filled past `end` (keys past the block's range; their cache rows may be unwritten).
fn load_tile(k0: u32, end: u32, kvh: u32, d4: u32, lid: u32, is_v: bool) {
  for (var i = lid; i < BK * d4; i += 128u) {
    let j = k0 + i / d4;
    var v = vec4<f32>(0.0);
    let g = (j * {{NKV}}u + kvh) * d4 + i % d4;
    if (j < end && is_v) { v = cache_v[g]; }
    if (j < end && !is_v) { v = cache_k[g]; }
    fkv[(i / d4) * KS + i % d4] = v;
  }
}

// Row r's running max after this tile (its old max and the FPR partial maxima).
fn tile_max(r: u32) -> f32 {
  var m = fm[r];
  for (var f = 0u; f < FPR; f++) { m = max(m, fmax[r * FPR + f]); }
  return m;
}

@compute @workgroup_size(128)
fn prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let rb = (wid.y * nwg.x + wid.x) % {{PRB}}u;
  let kvh = (wid.y * nwg.x + wid.x) / {{PRB}}u;
  if (kvh >= {{NKV}}u) { return; }
  let range = key_range(rb * BQ, BQ);
  let lo = range.x;
  let hi = range.y;
  for (var i = lid; i < BQ * D4; i += 128u) {
    let rw = row_of(rb * BQ + i / D4, kvh);
    fq[i] = select(vec4<f32>(0.0), q[(rw.t * {{NH}}u + rw.h) * D4 + i % D4], rw.live);
  }
  if (lid < BQ) { fm[lid] = NEG_BIG; fl[lid] = 0.0; }
  var acc: array<vec4<f32>, {{PACC}}>;
  for (var a = 0u; a < {{PACC}}u; a++) { acc[a] = vec4<f32>(0.0); }
  let kq = lid % BK;          // score thread: key kq, rows rq + NG i
  let rq = lid / BK;
  let sr = lid / FPR;         // softmax thread: row sr, keys sf * KPT ..
  let sf = lid % FPR;

  for (var k0 = lo; k0 < hi; k0 += BK) {
    load_tile(k0, hi, kvh, D4, lid, false);
    workgroupBarrier();
    // 1. scores
    var dots: array<f32, RPT>;
    for (var i = 0u; i < RPT; i++) { dots[i] = 0.0; }
    for (var d = 0u; d < D4; d++) {
      let kv = fkv[kq * KS + d];
      for (var i = 0u; i < RPT; i++) { dots[i] += dot(fq[(rq + NG * i) * D4 + d], kv); }
    }
    for (var i = 0u; i < RPT; i++) {
      let r = rq + NG * i;
      let rw = row_of(rb * BQ + r, kvh);
      var s = dots[i] * {{SCALE}};
      if ({{SOFTCAP}} > 0.0) { s = {{SOFTCAP}} * safe_tanh(s / {{SOFTCAP}}); }
      fs[r * BK + kq] = select(NEG_BIG, s, k0 + kq < hi && rw.live && key_visible(k0 + kq, P.pos + rw.t));
    }
    workgroupBarrier();
    // 2. partial maxima; the V tile replaces the K tile
    var mx = NEG_BIG;
    for (var i = 0u; i < KPT; i++) { mx = max(mx, fs[sr * BK + sf * KPT + i]); }
    fmax[lid] = mx;
    load_tile(k0, hi, kvh, DV4, lid, true);
    workgroupBarrier();
    // 3. probabilities and partial sums
    let m_new = tile_max(sr);
    var sum = 0.0;
    for (var i = 0u; i < KPT; i++) {
      let s = fs[sr * BK + sf * KPT + i];
      let p = select(exp(s - m_new), 0.0, s == NEG_BIG);
      fs[sr * BK + sf * KPT + i] = p;
      sum += p;
    }
    fsum[lid] = sum;
    workgroupBarrier();
    // 4. acc = acc * alpha + P V (thread: pairs e = a * 128 + lid; keys outermost, so where DV4
    // divides 128 every pair shares the column and one V load feeds them all)
    for (var a = 0u; a < {{PACC}}u; a++) {
      let r = min((a * 128u + lid) / DV4, BQ - 1u);
      let mr = tile_max(r);
      acc[a] *= select(exp(fm[r] - mr), 1.0, mr == NEG_BIG);
    }
    for (var i = 0u; i < BK; i++) {
      for (var a = 0u; a < {{PACC}}u; a++) {
        let e = a * 128u + lid;
        let r = min(e / DV4, BQ - 1u);      // pairs past the tile compute row BQ - 1 again, never stored
        acc[a] += fs[r * BK + i] * fkv[i * KS + e % DV4];
      }
    }
    workgroupBarrier();
    // 5. running statistics (read again only after the next tile's first barrier)
    if (lid < BQ) {
      let mr = tile_max(lid);
      var l = 0.0;
      for (var f = 0u; f < FPR; f++) { l += fsum[lid * FPR + f]; }
      fl[lid] = fl[lid] * select(exp(fm[lid] - mr), 1.0, mr == NEG_BIG) + l;
      fm[lid] = mr;
    }
  }
  workgroupBarrier();
  for (var a = 0u; a < {{PACC}}u; a++) {
    let e = a * 128u + lid;
    if (e < BQ * DV4 && rb * BQ + e / DV4 < {{T}}u * {{G}}u) {
      let rw = row_of(rb * BQ + e / DV4, kvh);
      let l = fl[e / DV4];
      dst[(rw.t * {{NH}}u + rw.h) * DV4 + e % DV4] = select(vec4<f32>(0.0), acc[a] / l, l > 0.0);
    }
  }
}
