// Team sums of attention_decode.wgsl with subgroup shuffles: a team is L consecutive invocations (L a
// power of two). Shuffles sum inside min(L, subgroup size) lanes (a transposed butterfly where TRANSPOSED,
// the team fits a subgroup and has 4 lanes or more, a plain one otherwise); only where the subgroup is
// narrower than the team (e.g. an 8-wide CPU device and L = 32) a workgroup-memory hop joins the
// sub-teams (`sgs` is workgroup-uniform, so that branch and its barriers are too). Every lane of a team
// ends with bit-identical totals (x + y == y + x at each butterfly level; the hop sums in one order).
// Assumes subgroups are contiguous, aligned runs of local_invocation_index (as gemv/reduce_sg.wgsl does).
// The includer defines L and WG; defines: TRANSPOSED.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_size) sg_size: u32,
  @builtin(subgroup_invocation_id) sg_lane: u32,
}

var<workgroup> red: array<vec4<f32>, WG / 4u + 1u>;   // WebGPU subgroups have at least 4 lanes
const TRANSPOSED: bool = {{TRANSPOSED}};
var<workgroup> sgs_w: u32;

// The subgroup width, workgroup-uniform (invocation 0's; every subgroup of a 1-D workgroup has it).
fn team_setup(lane: Lane) -> u32 {
  if (lane.lid == 0u) { sgs_w = lane.sg_size; }
  return workgroupUniformLoad(&sgs_w);
}

// The team total of v (4 independent sums) in every lane of the team.
fn team_sum4(lane: Lane, sgs: u32, v: vec4<f32>) -> vec4<f32> {
  var t = v;
  if (TRANSPOSED && sgs >= L && L >= 4u) {
    // transposed: two exchanges of half the vector leave lane i with component i % 4 summed over its
    // quad, a scalar butterfly sums it over the team, and every lane reads the four totals from the
    // team's first four lanes (10 shuffles for a 32-lane team instead of 20). Each component is summed in
    // the butterfly's pairs, so both forms give the same bits: batches take this one (fewer shuffles), a
    // one-row step the butterfly (one dependent shuffle fewer, where latency bounds it).
    let odd = (lane.sg_lane & 1u) != 0u;
    let h = select(v.xz, v.yw, odd) + subgroupShuffleXor(select(v.yw, v.xz, odd), 1u);
    let hi = (lane.sg_lane & 2u) != 0u;
    var c = select(h.x, h.y, hi) + subgroupShuffleXor(select(h.y, h.x, hi), 2u);
    for (var m = 4u; m < L; m <<= 1u) { c += subgroupShuffleXor(c, m); }
    let b = lane.sg_lane & ~(L - 1u);
    return vec4<f32>(subgroupShuffle(c, b), subgroupShuffle(c, b + 1u), subgroupShuffle(c, b + 2u),
                     subgroupShuffle(c, b + 3u));
  } else if (sgs >= L) {
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

// The team total of one value in every lane of the team (a q or k norm, a key's score): a plain butterfly
// (5 shuffles for 32 lanes; team_sum4's component x is summed in the same pairs, so the totals agree).
fn team_sum1(lane: Lane, sgs: u32, v: f32) -> f32 {
  if (sgs >= L) {
    var t = v;
    for (var m = 1u; m < L; m <<= 1u) { t += subgroupShuffleXor(t, m); }
    return t;
  }
  return team_sum4(lane, sgs, vec4<f32>(v, 0.0, 0.0, 0.0)).x;
}
