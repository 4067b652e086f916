// Rotary position embedding (common/rope.wgsl); row t is at position pos_of(t) (common/paged_*.wgsl:
// positions[t], or P.pos + t). One thread per (row, head, pair). Defines: NT (threads: rows * NH * HD/2),
// NH, PAGED (and common/paged_true.wgsl's), and common/rope.wgsl's (its table at binding 4).
#include "common/params.wgsl"
#include "common/rope.wgsl"
#include "common/paged_{{PAGED}}.wgsl"

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> ff: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{NT}}u) { return; }
  let j = id % ({{HD}}u / 2u);
  let row_head = id / ({{HD}}u / 2u);          // t * NH + h
  let e = row_head * {{HD}}u + rope_pair(j);
  let r = rope_rotate(pos_of(row_head / {{NH}}u), j, vec2<f32>(x[e.x], x[e.y]));
  y[e.x] = r.x;
  y[e.y] = r.y;
}
