// Team sums of attention_decode.wgsl with subgroup shuffles: a team is L consecutive invocations (L a
// power of two). An xor butterfly sums inside min(L, subgroup size) lanes; only where the subgroup is
// narrower than the team (e.g. an 8-wide CPU device and L = 32) a workgroup-memory hop joins the
// sub-teams (`sgs` is workgroup-uniform, so that branch and its barriers are too). Every lane of a team
// ends with bit-identical totals (x + y == y + x at each butterfly level; the hop sums in one order).
// Assumes subgroups are contiguous, aligned runs of local_invocation_index (as gemv/reduce_sg.wgsl does).
// The includer defines L and WG.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_size) sg_size: u32,
}

var<workgroup> red: array<vec4<f32>, WG / 4u + 1u>;   // WebGPU subgroups have at least 4 lanes
var<workgroup> sgs_w: u32;

// The subgroup width, workgroup-uniform (invocation 0's; every subgroup of a 1-D workgroup has it).
fn team_setup(lane: Lane) -> u32 {
  if (lane.lid == 0u) { sgs_w = lane.sg_size; }
  return workgroupUniformLoad(&sgs_w);
}

// The team total of v (4 independent sums) in every lane of the team.
fn team_sum4(lane: Lane, sgs: u32, v: vec4<f32>) -> vec4<f32> {
  var t = v;
  if (sgs >= L) {
    for (var m = 1u; m < L; m <<= 1u) { t += subgroupShuffleXor(t, m); }
  } else {
    for (var m = 1u; m < sgs; m <<= 1u) { t += subgroupShuffleXor(t, m); }
    let team = lane.lid / L;
    let n = L / sgs;
    let tl = lane.lid % L;
    if (tl % sgs == 0u) { red[team * n + tl / sgs] = t; }
    workgroupBarrier();
    t = red[team * n];
    for (var s = 1u; s < n; s++) { t += red[team * n + s]; }
    workgroupBarrier();
  }
  return t;
}
