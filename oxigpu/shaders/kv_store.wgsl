// KV-cache write: K[pos + t] = k[t], V[pos + t] = v[t] for t < n_tokens (padded rows never land).
// One thread per element of one k row followed by one v row. Defines: T, WK, WV (row widths), NT
// (threads: T * (WK + WV)).
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache_k: array<f32>;
@group(0) @binding(4) var<storage, read_write> cache_v: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{NT}}u) { return; }
  let t = id / ({{WK}}u + {{WV}}u);
  let c = id % ({{WK}}u + {{WV}}u);
  if (t >= P.n_tokens) { return; }
  let row = P.pos + t;
  if (c < {{WK}}u) {
    cache_k[row * {{WK}}u + c] = k[t * {{WK}}u + c];
  } else {
    let cv = c - {{WK}}u;
    cache_v[row * {{WV}}u + cv] = v[t * {{WV}}u + cv];
  }
}
