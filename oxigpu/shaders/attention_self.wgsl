// Encoder self-attention: every valid row attends every valid row of the chunk (no cache, no causal
// mask). One workgroup per (row, head): the row's scores over the n_tokens keys live in workgroup memory,
// then the softmax and the weighted sum of values. Padded rows are zero.
// Defines: T (rows, at most the plan's chunk), H, HKV, D, DV, SCALE, WG (64).
#include "common/params.wgsl"
#include "math.wgsl"

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = {{WG}}u;
var<workgroup> sc: array<f32, {{T}}>;
var<workgroup> red: array<f32, WG>;

fn reduce(lid: u32, val: f32, is_max: bool) -> f32 {
  red[lid] = val;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      if (is_max) { red[lid] = max(red[lid], red[lid + s]); } else { red[lid] += red[lid + s]; }
    }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.x;
  let h = wid.y;
  let hk = h / ({{H}}u / {{HKV}}u);
  let n = min(P.n_tokens, {{T}}u);
  let out = t * ({{H}}u * {{DV}}u) + h * {{DV}}u;
  if (t >= n) {                      // uniform per workgroup
    for (var d = lid; d < {{DV}}u; d += WG) { y[out + d] = 0.0; }
    return;
  }
  let qb = t * ({{H}}u * {{D}}u) + h * {{D}}u;
  var m = NEG_BIG;
  for (var j = lid; j < n; j += WG) {
    let kb = j * ({{HKV}}u * {{D}}u) + hk * {{D}}u;
    var s = 0.0;
    for (var d = 0u; d < {{D}}u; d++) { s += q[qb + d] * k[kb + d]; }
    s *= {{SCALE}};
    sc[j] = s;
    m = max(m, s);
  }
  m = reduce(lid, m, true);
  var l = 0.0;
  for (var j = lid; j < n; j += WG) { let p = exp(sc[j] - m); sc[j] = p; l += p; }
  l = reduce(lid, l, false);
  let inv = 1.0 / l;
  for (var d = lid; d < {{DV}}u; d += WG) {
    var acc = 0.0;
    for (var j = 0u; j < n; j++) { acc += sc[j] * v[j * ({{HKV}}u * {{DV}}u) + hk * {{DV}}u + d]; }
    y[out + d] = acc * inv;
  }
}
