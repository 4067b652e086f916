// Elementwise ops on flat f32 arrays: add, gated activations (act(gate) * up).
// Defines: N (elements).
#include "math.wgsl"

@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const N: u32 = {{N}}u;

fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * 256u + lid;
}

@compute @workgroup_size(256)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i < N) { y[i] = a[i] + b[i]; }
}

@compute @workgroup_size(256)
fn glu_silu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i < N) { y[i] = silu(a[i]) * b[i]; }
}

@compute @workgroup_size(256)
fn glu_gelu_tanh(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i < N) { y[i] = gelu_tanh(a[i]) * b[i]; }
}
