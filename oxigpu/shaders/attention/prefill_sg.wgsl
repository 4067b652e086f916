// Row-group reductions of attention.wgsl's prefill with subgroup xor shuffles (a row group is NKL
// consecutive, NKL-aligned invocations, so it lies inside one subgroup wherever the subgroup has at least
// NKL lanes; subgroups are assumed to be aligned runs of local_invocation_index, as elsewhere). Narrower
// subgroups take the workgroup-memory path; `sgs` is workgroup-uniform, so its barrier is too.

#include "attention/prefill_red.wgsl"

struct Lane {
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_size) sg_size: u32,
}

var<workgroup> sgs_w: u32;

// The subgroup width, workgroup-uniform (invocation 0's).
fn red_setup(lane: Lane) -> u32 {
  if (lane.lid == 0u) { sgs_w = lane.sg_size; }
  return workgroupUniformLoad(&sgs_w);
}

fn red_max(lane: Lane, sgs: u32, v: vec4<f32>) -> vec4<f32> {
  if (sgs < NKL) { return wg_max(lane.lid, v); }
  var t = v;
  for (var s = 1u; s < NKL; s <<= 1u) { t = max(t, subgroupShuffleXor(t, s)); }
  return t;
}

fn red_sum(lane: Lane, sgs: u32, v: vec4<f32>) -> vec4<f32> {
  if (sgs < NKL) { return wg_sum(lane.lid, v); }
  var t = v;
  for (var s = 1u; s < NKL; s <<= 1u) { t += subgroupShuffleXor(t, s); }
  return t;
}
