// One-thread-per-element ops on [rows, cols] f32 activations: scale (with an optional tanh soft-cap),
// ungated activations, and column-block copies (split).
// Defines: N (elements of the output), and per entry: SCALE/SOFTCAP/INV_SOFTCAP (scale; 0 for no cap),
// COLS_IN/COLS/OFF (copy_cols); entries that do not use a define get a neutral value.
#include "math.wgsl"

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

const N: u32 = {{N}}u;

fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * 256u + lid;
}

@compute @workgroup_size(256)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i >= N) { return; }
  var v = x[i] * {{SCALE}};
  if ({{SOFTCAP}} > 0.0) { v = safe_tanh(v * {{INV_SOFTCAP}}) * {{SOFTCAP}}; }
  y[i] = v;
}

@compute @workgroup_size(256)
fn act_gelu_tanh(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i < N) { y[i] = gelu_tanh(x[i]); }
}

// y[r, c] = x[r, OFF + c] for c < COLS: one output of a split.
@compute @workgroup_size(256)
fn copy_cols(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i >= N) { return; }
  let r = i / {{COLS}}u;
  let c = i % {{COLS}}u;
  y[i] = x[r * {{COLS_IN}}u + {{OFF}}u + c];
}
