// Mixture-of-experts mixing (the routing is moe_route.wgsl).
// sum: y[t, c] = sum_j w[t, j] * x[t, j*N + c], the chosen experts' outputs mixed by their weights (plus
//   res[t, c] with HAS_RES: moe_sum_add).
// Defines: T (rows), KSEL, N (width of one expert's output), HAS_RES.
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> w: array<f32>;
@group(0) @binding(5) var<storage, read> res: array<f32>;   // sum with HAS_RES (moe_sum_add): the residual

fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * 64u + lid;
}

@compute @workgroup_size(64)
fn sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i >= {{T}}u * {{N}}u) { return; }
  let t = i / {{N}}u;
  let c = i % {{N}}u;
  var acc = 0.0;
  for (var j = 0u; j < {{KSEL}}u; j++) {
    acc += b[t * {{KSEL}}u + j] * a[(t * {{KSEL}}u + j) * {{N}}u + c];
  }
  if ({{HAS_RES}}) { acc = res[i] + acc; }
  w[i] = acc;
}
