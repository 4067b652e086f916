// kv_store and rope_kv_store into caches where K or V is block-quantized (kv/<type>.wgsl; f16 halves of
// the other go through kv/f16.wgsl): a block's scale needs all 32 of its values, so one thread takes 64
// values of a row (two blocks: whole words whatever the type) and writes their words. Rows t >= n_tokens
// never land; row t lands in cache row phys(seq_of(t), pos_of(t)) (common/paged_*.wgsl).
// Threads: with ROPE, the q pairs first (T * NH * HD/2, rotated into y as rope_kv.wgsl does), then the
// 64-value chunks of the k rows (T * WK/64, rotated with ROPE), then those of the v rows (T * WV/64).
// Defines: WK, WV (values per k and v row), CTK, CTV (cache types), KROW, VROW (words per cache row), NQ,
// NK, NT (thread counts: q, q + k, all), ROPE (and with it NH, common/rope.wgsl's defines: table at
// binding 11), PAGED (and its defines: bindings 5-7).
#include "common/params.wgsl"
#include "common/half.wgsl"
#include "common/paged_{{PAGED}}.wgsl"
#include "kv/{{CTK}}.wgsl"
#include "kv/{{CTV}}.wgsl"
#include "kv/store_rope_{{ROPE}}.wgsl"

@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache_k: array<u32>;
@group(0) @binding(4) var<storage, read_write> cache_v: array<u32>;

const WK: u32 = {{WK}}u;
const WV: u32 = {{WV}}u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{NT}}u) { return; }
  if (id < {{NQ}}u) {
    rope_q(id);
    return;
  }
  var x: array<f32, 64>;
  if (id < {{NK}}u) {
    let i = id - {{NQ}}u;
    let t = i / (WK / 64u);
    let c = i % (WK / 64u);
    if (t >= P.n_tokens) { return; }
    let p = pos_of(t);
    for (var j = 0u; j < 64u; j++) { x[j] = k_value(t * WK, 64u * c + j, p); }
    let w = {{CTK}}_put64(&x);
    let base = phys(seq_of(t), p) * {{KROW}}u + c * {{CTK}}_W64;
    for (var j = 0u; j < {{CTK}}_W64; j++) { cache_k[base + j] = w[j]; }
  } else {
    let i = id - {{NK}}u;
    let t = i / (WV / 64u);
    let c = i % (WV / 64u);
    if (t >= P.n_tokens) { return; }
    for (var j = 0u; j < 64u; j++) { x[j] = v[t * WV + 64u * c + j]; }
    let w = {{CTV}}_put64(&x);
    let base = phys(seq_of(t), pos_of(t)) * {{VROW}}u + c * {{CTV}}_W64;
    for (var j = 0u; j < {{CTV}}_W64; j++) { cache_v[base + j] = w[j]; }
  }
}
