// KV-cache write: K[r] = k[t], V[r] = v[t] for t < n_tokens (padded rows never land), as packed halves
// (common/half.wgsl), at cache row r = phys(seq_of(t), pos_of(t)) (common/paged_*.wgsl: through the
// row's block table, or row P.pos + t). One thread per pair of elements of one k row followed by one v
// row. Defines: HK, HV (pairs per row of k and v), NT (threads: T * (HK + HV)), PAGED (and its defines).
#include "common/params.wgsl"
#include "common/half.wgsl"
#include "common/paged_{{PAGED}}.wgsl"

@group(0) @binding(1) var<storage, read> k: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> cache_k: array<u32>;
@group(0) @binding(4) var<storage, read_write> cache_v: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{NT}}u) { return; }
  let t = id / ({{HK}}u + {{HV}}u);
  let c = id % ({{HK}}u + {{HV}}u);
  if (t >= P.n_tokens) { return; }
  let row = phys(seq_of(t), pos_of(t));
  if (c < {{HK}}u) {
    cache_k[row * {{HK}}u + c] = pack_half2(k[t * {{HK}}u + c]);
  } else {
    let cv = c - {{HK}}u;
    cache_v[row * {{HV}}u + cv] = pack_half2(v[t * {{HV}}u + cv]);
  }
}
