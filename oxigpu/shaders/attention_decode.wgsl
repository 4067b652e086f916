// Decode attention (and the fallback for any T): split-KV flash attention over the cache in ONE
// dispatch, the splits merged by the workgroup that finishes last.
//
// Rows: the query rows of one KV head are the (t, g) pairs flattened as rg = t * G + g (query head
// h = kvh * G + g); a workgroup takes a block of R consecutive rows (decode: the G heads sharing a KV
// head, so K and V are read once for the group) and one split of the keys those rows can see.
// Splits: the grid holds MAXS splits per row block, but only `nact` are active, computed from P at run
// time: keys per split = max(CHUNK, ceil(n_keys / MAXS)) rounded up to BLK (one pass of the workgroup),
// so short contexts use one workgroup per row block and idle workgroups return at once.
// Inside a workgroup: NT teams of L lanes. A team takes KB keys per pass (team-interleaved, so a pass of
// the workgroup covers BLK = NT * KB consecutive keys); its lanes hold vec4 columns c = tl + i * L of q
// (registers), of K and V rows (coalesced loads) and of the output accumulator. A score is a team sum
// (attention/team_{sg,wg}.wgsl); the online softmax runs per team in registers (every lane holds the
// same statistics). At the end the teams merge through workgroup memory.
// Merge across workgroups: with one active split the workgroup writes the output. Otherwise each writes
// its partial (max m, sum l, accumulator) to `part`, then storageBarrier() (device-scope release) and one
// atomicAdd on the row block's counter; the workgroup that sees nact - 1 is last: storageBarrier()
// (acquire), it merges every partial into the output and resets the counter to 0 for the next run.
// Masking: keys outside a row's causal/window range get no weight; loads are clamped into the split's
// range, so no cache row at or past pos + n_tokens is read. Padded rows (t >= n_tokens) write zeros.
//
// Defines: D, DV (head dims, multiples of 4), G, NH, NKV, T, R, NRB (row blocks per KV head), L, NT, KB,
// NCK (= ceil(D / 4 / L)), NCV (= ceil(DV / 4 / L)), MAXS, CHUNK (a multiple of NT * KB), RPR (rows per
// round of the in-workgroup merge), RED (team scratch floats), REDUCE (sg | wg), SCALE, SOFTCAP (0:
// none), WINDOW (0: none).
#include "common/params.wgsl"
#include "math.wgsl"

@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> cache_k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> cache_v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> part: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> counters: array<atomic<u32>>;

const D4: u32 = {{D}}u / 4u;
const DV4: u32 = {{DV}}u / 4u;
const G: u32 = {{G}}u;
const NH: u32 = {{NH}}u;
const NKV: u32 = {{NKV}}u;
const R: u32 = {{R}}u;
const NRB: u32 = {{NRB}}u;
const L: u32 = {{L}}u;
const NT: u32 = {{NT}}u;
const WG: u32 = L * NT;
const KB: u32 = {{KB}}u;
const BLK: u32 = NT * KB;
const NCK: u32 = {{NCK}}u;
const NCV: u32 = {{NCV}}u;
const MAXS: u32 = {{MAXS}}u;
const CHUNK: u32 = {{CHUNK}}u;
const RPR: u32 = {{RPR}}u;
const NROUND: u32 = (R + RPR - 1u) / RPR;
const NS: u32 = R * KB;          // scores per team pass
const RED: u32 = {{RED}}u;
const PART: u32 = DV4 + 1u;      // vec4s per partial row: (m, l, 0, 0), then the DV accumulator

#include "attention/team_{{REDUCE}}.wgsl"

var<workgroup> tml: array<vec2<f32>, NT * R>;          // per team and row: (m, l)
var<workgroup> tacc: array<vec4<f32>, NT * RPR * DV4>; // per team: the accumulators of one round's rows
var<workgroup> wsh: array<f32, MAXS * R>;             // cross-workgroup merge: weight of split s, row r
var<workgroup> lsh: array<f32, R>;
var<workgroup> last_w: u32;

struct Row { t: u32, h: u32, live: bool, valid: bool }

// Query row rg (= t * G + g) of KV head kvh; `valid`: a row of the chunk at all (rg < T * G).
fn row_of(rg: u32, kvh: u32) -> Row {
  let t = rg / G;
  let valid = rg < {{T}}u * G;
  return Row(t, kvh * G + rg % G, valid && t < P.n_tokens, valid);
}

fn key_visible(j: u32, p: u32) -> bool {
  return j <= p && ({{WINDOW}}u == 0u || j + {{WINDOW}}u > p);
}

// Keys any live row of the n rows from rg0 can see: [lo, hi). Empty when every row is padding.
fn key_range(rg0: u32, n: u32) -> vec2<u32> {
  let t_first = rg0 / G;
  if (t_first >= P.n_tokens) { return vec2<u32>(0u); }
  let t_last = min((rg0 + n - 1u) / G, min({{T}}u, P.n_tokens) - 1u);
  var lo = 0u;
  if ({{WINDOW}}u > 0u && P.pos + t_first + 1u > {{WINDOW}}u) { lo = P.pos + t_first + 1u - {{WINDOW}}u; }
  return vec2<u32>(lo, P.pos + t_last + 1u);
}

// Index of the (m, l) vec4 of split s, row r of row block blk in `part` (the accumulator follows it).
fn part_at(blk: u32, s: u32, r: u32) -> u32 { return ((blk * MAXS + s) * R + r) * PART; }

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let linear = wid.y * nwg.x + wid.x;
  let split = linear % MAXS;
  let blk = linear / MAXS;              // kvh * NRB + rb
  if (blk >= NKV * NRB) { return; }
  let rb = blk % NRB;
  let kvh = blk / NRB;
  let range = key_range(rb * R, R);
  let n_keys = range.y - range.x;
  let kps = max(CHUNK, (n_keys + MAXS * BLK - 1u) / (MAXS * BLK) * BLK);
  let nact = max(1u, (n_keys + kps - 1u) / kps);
  if (split >= nact) { return; }
  let ks = range.x + split * kps;
  let ke = min(ks + kps, range.y);

  let sgs = team_setup(lane);
  let lid = lane.lid;
  let team = lid / L;
  let tl = lid % L;

  var tpos: array<u32, R>;
  var live: array<bool, R>;
  var qr: array<array<vec4<f32>, NCK>, R>;
  var acc: array<array<vec4<f32>, NCV>, R>;
  var m: array<f32, R>;
  var l: array<f32, R>;
  for (var r = 0u; r < R; r++) {
    let rw = row_of(rb * R + r, kvh);
    tpos[r] = P.pos + rw.t;
    live[r] = rw.live;
    m[r] = NEG_BIG;
    l[r] = 0.0;
    for (var i = 0u; i < NCK; i++) {
      let c = tl + i * L;
      qr[r][i] = vec4<f32>(0.0);
      if (rw.live && c < D4) { qr[r][i] = q[(rw.t * NH + rw.h) * D4 + c] * {{SCALE}}; }
    }
    for (var i = 0u; i < NCV; i++) { acc[r][i] = vec4<f32>(0.0); }
  }

  let nblk = (ke - ks + BLK - 1u) / BLK;    // workgroup-uniform: the team reductions may hold barriers
  for (var b = 0u; b < nblk; b++) {
    let k0 = ks + b * BLK + team * KB;
    var kv: array<array<vec4<f32>, NCK>, KB>;
    var vv: array<array<vec4<f32>, NCV>, KB>;
    for (var k = 0u; k < KB; k++) {
      let j = min(k0 + k, ke - 1u);         // clamped: always a written row of the split
      for (var i = 0u; i < NCK; i++) { kv[k][i] = cache_k[(j * NKV + kvh) * D4 + min(tl + i * L, D4 - 1u)]; }
      for (var i = 0u; i < NCV; i++) { vv[k][i] = cache_v[(j * NKV + kvh) * DV4 + min(tl + i * L, DV4 - 1u)]; }
    }
    var sc: array<f32, NS>;
    for (var k = 0u; k < KB; k++) {
      for (var r = 0u; r < R; r++) {
        var d = 0.0;
        for (var i = 0u; i < NCK; i++) { d += dot(qr[r][i], kv[k][i]); }
        sc[k * R + r] = d;
      }
    }
    team_sum(lane, sgs, &sc);
    for (var r = 0u; r < R; r++) {
      var mb = NEG_BIG;
      for (var k = 0u; k < KB; k++) {
        let j = k0 + k;
        var s = sc[k * R + r];
        if ({{SOFTCAP}} > 0.0) { s = {{SOFTCAP}} * safe_tanh(s / {{SOFTCAP}}); }
        s = select(NEG_BIG, s, j < ke && live[r] && key_visible(j, tpos[r]));
        sc[k * R + r] = s;
        mb = max(mb, s);
      }
      let mn = max(m[r], mb);
      let alpha = select(exp(m[r] - mn), 1.0, mn == NEG_BIG);
      var o: array<vec4<f32>, NCV>;
      for (var i = 0u; i < NCV; i++) { o[i] = acc[r][i] * alpha; }
      var ps = 0.0;
      for (var k = 0u; k < KB; k++) {
        let s = sc[k * R + r];
        let p = select(exp(s - mn), 0.0, s == NEG_BIG);
        ps += p;
        for (var i = 0u; i < NCV; i++) { o[i] += p * vv[k][i]; }
      }
      for (var i = 0u; i < NCV; i++) { acc[r][i] = o[i]; }
      l[r] = l[r] * alpha + ps;
      m[r] = mn;
    }
  }

  // Merge the teams: statistics first, then the accumulators RPR rows per round.
  if (tl == 0u) {
    for (var r = 0u; r < R; r++) { tml[team * R + r] = vec2<f32>(m[r], l[r]); }
  }
  let direct = nact == 1u;
  for (var round = 0u; round < NROUND; round++) {
    workgroupBarrier();
    for (var r = 0u; r < R; r++) {
      if (r / RPR == round) {
        for (var i = 0u; i < NCV; i++) {
          let c = tl + i * L;
          if (c < DV4) { tacc[(team * RPR + r % RPR) * DV4 + c] = acc[r][i]; }
        }
      }
    }
    workgroupBarrier();
    for (var e = lid; e < RPR * DV4; e += WG) {
      let r = round * RPR + e / DV4;
      let c = e % DV4;
      let rw = row_of(rb * R + r, kvh);
      if (r < R && rw.valid) {
        var mx = NEG_BIG;
        for (var t = 0u; t < NT; t++) { mx = max(mx, tml[t * R + r].x); }
        var a = vec4<f32>(0.0);
        var ls = 0.0;
        for (var t = 0u; t < NT; t++) {
          let st = tml[t * R + r];
          let w = select(exp(st.x - mx), 0.0, st.x == NEG_BIG);
          ls += w * st.y;
          a += w * tacc[(t * RPR + e / DV4) * DV4 + c];
        }
        if (direct) {
          out[(rw.t * NH + rw.h) * DV4 + c] = select(vec4<f32>(0.0), a / ls, ls > 0.0);
        } else {
          let pa = part_at(blk, split, r);
          part[pa + 1u + c] = a;
          if (c == 0u) { part[pa] = vec4<f32>(mx, ls, 0.0, 0.0); }
        }
      }
    }
  }
  if (direct) { return; }

  // Publish this split; the last of the row block's nact workgroups merges them all.
  storageBarrier();
  if (lid == 0u) { last_w = atomicAdd(&counters[blk], 1u); }
  if (workgroupUniformLoad(&last_w) != nact - 1u) { return; }
  storageBarrier();
  // 1. per row (a team each): the global max over the splits, each split's weight, the total sum
  for (var r0 = 0u; r0 < R; r0 += NT) {
    let r = r0 + team;
    var mx = NEG_BIG;
    for (var s0 = 0u; s0 < nact; s0 += L) {
      let s = s0 + tl;
      if (r < R && s < nact) { mx = max(mx, part[part_at(blk, s, r)].x); }
    }
    mx = team_max1(lane, sgs, mx);
    var ls = 0.0;
    for (var s0 = 0u; s0 < nact; s0 += L) {
      let s = s0 + tl;
      if (r < R && s < nact) {
        let st = part[part_at(blk, s, r)];
        let w = select(exp(st.x - mx), 0.0, st.x == NEG_BIG);
        wsh[s * R + r] = w;
        ls += w * st.y;
      }
    }
    ls = team_sum1(lane, sgs, ls);
    if (tl == 0u && r < R) { lsh[r] = ls; }
  }
  workgroupBarrier();
  // 2. one thread per output vec4: the weighted sum of the splits' accumulators (four loads in flight)
  for (var e = lid; e < R * DV4; e += WG) {
    let r = e / DV4;
    let c = e % DV4;
    let rw = row_of(rb * R + r, kvh);
    if (rw.valid) {
      var a = vec4<f32>(0.0);
      var s = 0u;
      for (; s + 4u <= nact; s += 4u) {
        let a0 = part[part_at(blk, s, r) + 1u + c];
        let a1 = part[part_at(blk, s + 1u, r) + 1u + c];
        let a2 = part[part_at(blk, s + 2u, r) + 1u + c];
        let a3 = part[part_at(blk, s + 3u, r) + 1u + c];
        a += wsh[s * R + r] * a0 + wsh[(s + 1u) * R + r] * a1 + wsh[(s + 2u) * R + r] * a2
             + wsh[(s + 3u) * R + r] * a3;
      }
      for (; s < nact; s++) { a += wsh[s * R + r] * part[part_at(blk, s, r) + 1u + c]; }
      let ls = lsh[r];
      out[(rw.t * NH + rw.h) * DV4 + c] = select(vec4<f32>(0.0), a / ls, ls > 0.0);
    }
  }
  if (lid == 0u) { atomicStore(&counters[blk], 0u); }
}
