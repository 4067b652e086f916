// Prefill attention (T > 1) on the matrix units (Dawn's subgroup matrices, f16 x f16 -> f32, subgroups of
// 32): attention.wgsl's job where Device.has_mma and the head dims are multiples of 16, at most 128.
// Same bindings, row order (rg = t * G + g of KV head kvh) and masking as attention.wgsl.
//
// A workgroup of NSG subgroups takes BQ = 16 NSG rows (16 per subgroup; Q * SCALE as f16 fragments held
// in registers) and walks the keys they can see in tiles of BK keys, staged as f16 in workgroup memory
// (16-byte cache loads into registers one stage ahead; zero at or past the block's last key: cache rows
// there may be NaN). Per tile: S = Q K^T per subgroup into workgroup memory (ss); per row (two lanes a
// row, BK / 2 keys each, read once into registers) the tile's masked maximum, P = exp(S - m) as f16 into ps
// and the running sum l;
// O += P V. The result matrices cannot be scaled row by row, so m is a reference maximum that only moves
// when a tile's maximum exceeds it by more than RESCALE (P <= e^RESCALE stays a finite f16); then, and
// only then (workgroup-uniform: a flag in workgroup memory), every O block goes through ss to be scaled
// by exp(m_old - m_new) per row. Real attention rarely moves it past the first tile.
// Defines: D, DV, G, NH, NKV, T, SCALE, SOFTCAP (0: none), WINDOW (0: none), PRB (row blocks per KV
// head), NSG, BK, and the generated blocks (ops/attention_mma.py): QLOAD, K_LOAD, K_LOAD_NEXT, K_STORE,
// V_LOAD, V_STORE, S_MMA, SM_READ, SM_WRITE, ODECL, O_RESCALE, PV_MMA, O_OUT; KVQ (quantized caches:
// dequantized into the staged f16 tile, attention/mma_kv_true.wgsl); PAGED and TILES as attention.wgsl;
// UNITS and attention/units.wgsl's (key units; TRW, the output rows, where UNITS).
diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
#include "common/params.wgsl"
#include "math.wgsl"
#include "common/paged_{{PAGED}}.wgsl"
#include "attention/mma_kv_{{KVQ}}.wgsl"
#include "attention/units.wgsl"
#include "attention/mma_out_{{UNITS}}.wgsl"

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> cache_k: array<MW>;   // f16: [pos][NKV][D] halves, 8 a vec4
@group(0) @binding(3) var<storage, read> cache_v: array<MW>;   // (attention/mma_kv_{{KVQ}}.wgsl)
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const D4: u32 = D / 4u;
const DV4: u32 = DV / 4u;
const G: u32 = {{G}}u;
const NH: u32 = {{NH}}u;
const NKV: u32 = {{NKV}}u;
const ROWS: u32 = {{T}}u * G;
const SCALE: f32 = {{SCALE}};
const SOFTCAP: f32 = {{SOFTCAP}};
const WINDOW: u32 = {{WINDOW}}u;
const PRB: u32 = {{PRB}}u;
const NSG: u32 = {{NSG}}u;
const BQ: u32 = 16u * NSG;
const RB: u32 = (ROWS + BQ - 1u) / BQ;   // fixed row blocks per KV head (one sequence)
const BK: u32 = {{BK}}u;
const WG: u32 = 32u * NSG;
const THR: u32 = WG;
const CPL: u32 = BK / 2u;           // keys (and output columns) per lane of a row
const LD: u32 = max(D, DV) + 8u;    // halves per staged row (8 of padding)
const SL: u32 = BK + 4u;            // f32 per score row
const PL: u32 = BK + 8u;            // halves per probability row
const RESCALE: f32 = 8.0;

var<workgroup> kv: array<f16, max(BQ, BK) * LD>;   // the Q tile first, then each K and V tile [row][d]
var<workgroup> ss: array<f32, BQ * SL>;            // scores, O blocks on their way through, [row][col]
var<workgroup> ps: array<f16, BQ * PL>;            // probabilities [row][key]
var<workgroup> flag: array<u32, 4>;                // some row moved its reference maximum (by tile parity)
// (4 words, not 2: every workgroup array here is a multiple of 16 bytes, so wherever the driver places
// them the matrix loads' rows stay 16-byte aligned; with an 8-byte flag NVIDIA's driver lost each K
// row's last 4 halves from S = Q K^T)

// 8 halves of key row k0 + e / W8 (W8 = vec4s per row), zero at or past hi.
fn load8(k0: u32, hi: u32, kvh: u32, e: u32, V: bool) -> vec4<u32> {
  let W8 = select(D, DV, V) / 8u;
  let j = k0 + e / W8;
  var v = vec4<u32>(0u);
  if (j < hi) { v = kv8(phys(tile_seq, j), kvh, e % W8, V); }
  return v;
}

fn store8(e: u32, v: vec4<u32>, V: bool) {
  let W8 = select(D, DV, V) / 8u;
  let o = (e / W8) * LD + 8u * (e % W8);
  for (var i = 0u; i < 4u; i++) {
    let h = bitcast<vec2<f16>>(v[i]);
    kv[o + 2u * i] = h.x;
    kv[o + 2u * i + 1u] = h.y;
  }
}

// Word e (halves 2e % W2 ..) of key row k0 + e / W2 (W2 = words per row), zero at or past hi: the
// word-per-lane staging (MmaTile.W), a subgroup's lanes side by side along a row.
fn loadw(k0: u32, hi: u32, kvh: u32, e: u32, V: bool) -> u32 {
  let W2 = select(D, DV, V) / 2u;
  let j = k0 + e / W2;
  var v = 0u;
  if (j < hi) { v = kvw(phys(tile_seq, j), kvh, e % W2, V); }
  return v;
}

fn storew(e: u32, v: u32, V: bool) {
  let W2 = select(D, DV, V) / 2u;
  let o = (e / W2) * LD + 2u * (e % W2);
  let h = bitcast<vec2<f16>>(v);
  kv[o] = h.x;
  kv[o + 1u] = h.y;
}

#include "attention/tiles_{{TILES}}.wgsl"
#include "attention/prefill_rows.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let wa = wid.y * nwg.x + wid.x;
  if (wa >= PRB * NKV * NU) { return; }
  let w = wa % (PRB * NKV);
  let un = wa / (PRB * NKV);               // uniform (a private variable is not, to the analysis)
  unit = un;
  let kvh = w % NKV;
  var rg0 = 0u;
  var lo = 0u;
  var hi = 0u;
  if (!one_seq()) {                        // this workgroup's tile: rows of one sequence (attention/tiles_true.wgsl)
    let tl = find_tile(lid, w / NKV);
    if (tl.z == 0u) { return; }
    rg0 = tl.x * G + tl.y;
    let kr = tile_keys(tl);
    lo = kr.x;
    hi = kr.y;
  } else {
    if (w / NKV >= RB) { return; }         // TILES: the tile table's extra workgroups
    rg0 = (RB - 1u - w / NKV) * BQ;        // the longest row blocks first
    let kr = key_range(rg0);               // uniform (row_window reads the TILES tile's state)
    lo = kr.x;
    hi = kr.y;
    if (NU > 1u) {                         // this unit's keys only; none: its rows say so to the merge
      let ur = unit_range(vec2<u32>(lo, hi), un);
      lo = ur.x;
      hi = ur.y;
      if (lo >= hi) {
        for (var u = lid; u < BQ; u += WG) {
          let r = rg0 + u;
          if (r < ROWS && r / G < P.n_tokens) { put_ml(r / G, kvh * G + r % G, NEG_BIG, 0.0); }
        }
        return;
      }
    }
  }
  let sg = lid / 32u;
  let e = lid % 32u;
  let row = 16u * sg + e / 2u;             // this lane's row of the block, keys c0 .. c0 + CPL of a tile
  let rg = rg0 + row;
  let c0 = CPL * (e % 2u);
  // The order a lane takes its CPL scores in, rotated by its place among the 4 lanes whose rows share
  // banks (SL = 4 mod 32 words: rows r and r + 8, both halves): the 32 lanes read 32 banks at once.
  let rot = e / 16u + 2u * (e % 2u);
  let win = unit_window(row_window(rg), lo, hi);   // (with units: the row's keys in this unit)
  let keys = vec2<u32>(win.x, win.x + win.y);     // [first, end) of this row's keys

  // Q tile (times SCALE) as f16 into kv, then each subgroup's 16 rows into registers.
  for (var u = lid; u < BQ * D; u += WG) {
    let r = rg0 + u / D;
    let t = r / G;
    var v = 0.0;
    if (r < ROWS && t < P.n_tokens && in_tile(r)) { v = q[(t * NH + kvh * G + r % G) * D + u % D] * SCALE; }
    kv[(u / D) * LD + u % D] = f16(v);
  }
  if (lid == 0u) { flag[0] = 0u; flag[1] = 0u; }
  var k0 = lo;
{{K_LOAD}}
  workgroupBarrier();
{{QLOAD}}
  var m = NEG_BIG;    // this row's reference maximum (equal in its two lanes)
  var l = 0.0;    // this lane's share of the row sum
{{ODECL}}
  for (var par = 0u; k0 < hi; par ^= 1u) {
    workgroupBarrier();            // kv is free: the Q fragments, or the last tile's V, were read
{{K_STORE}}
    workgroupBarrier();
{{V_LOAD}}
{{S_MMA}}
    workgroupBarrier();
    let nk = k0 + BK;
    if (nk < hi) {
{{K_LOAD_NEXT}}
    }
    var mt = NEG_BIG;
{{SM_READ}}
    mt = max(mt, subgroupShuffleXor(mt, 1u));
    var alpha = 1.0;
    if (mt > m + RESCALE) {
      if (m > NEG_BIG) { flag[par] = 1u; }   // O holds earlier tiles: it must be scaled too
      alpha = exp(m - mt);
      m = mt;
      l *= alpha;
    }
{{SM_WRITE}}
    if (lid == 0u) { flag[par ^ 1u] = 0u; }   // read by every lane a tile ago
{{V_STORE}}
    if (workgroupUniformLoad(&flag[par]) != 0u) {   // the barrier that publishes V and P as well
{{O_RESCALE}}
    }
{{PV_MMA}}
    k0 = nk;
  }
  l += subgroupShuffleXor(l, 1u);

  // O / l to dst, BK / 16 blocks at a time through this subgroup's rows of ss
  let t = rg / G;
  let live = rg < ROWS && in_tile(rg);    // padding tokens' rows saw no keys: zeros
  let h = kvh * G + rg % G;
  var inv = 0.0;
  if (l > 0.0) { inv = 1.0 / l; }
{{O_OUT}}
  if (live && c0 == 0u) { put_ml(t, h, m, l); }
}
