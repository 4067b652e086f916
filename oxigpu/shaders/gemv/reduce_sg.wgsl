// Row totals of a GEMV group (TPR lanes, NA = R x XR sums, plus XR x^2 sums under HAS_NORM) with subgroup
// shuffles: an xor butterfly inside min(TPR, subgroup size) lanes, then one shared-memory hop across
// the group's subgroups (needed only when TPR is larger than the subgroup; always compiled in, so the
// barrier stays uniform). Groups are TPR consecutive invocation indices; subgroups are assumed to be
// contiguous runs of them. TSUM: the NA sums take the transposed butterfly (generated TSUM_CODE, ops/matmul.py
// gemv_tsum_code: fewer shuffles, the same pairs, so the same bits); the x^2 sums the plain one.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) sg_lane: u32,
  @builtin(subgroup_size) sg_size: u32,
}

const NV: u32 = select(NA, NA + XR, HAS_NORM);   // values reduced per group
const TSUM: bool = {{TSUM}};
var<workgroup> red: array<f32, WG * NV>;

// (total of sum `gl`, total of its x row's x^2) of group `grp`, valid in lanes gl < NA.
fn group_sum(lane: Lane, grp: u32, gl: u32, acc: array<f32, NVA>) -> vec2<f32> {
  var v = acc;
  let c = min(TPR, lane.sg_size);
  let r0 = select(0u, NA, TSUM);   // TSUM: the NA sums are the transposed butterfly's, below
  if (TSUM) {
{{TSUM_CODE}}
  }
  for (var m = 1u; m < c; m <<= 1u) {
    for (var r = r0; r < NV; r++) { v[r] += subgroupShuffleXor(v[r], m); }
  }
  if (gl % c == 0u) {
    for (var r = r0; r < NV; r++) { red[(grp * NV + r) * TPR + gl / c] = v[r]; }
  }
  workgroupBarrier();
  var t = vec2<f32>(0.0);
  if (gl < NA) {
    for (var s = 0u; s < TPR / c; s++) {
      t.x += red[(grp * NV + gl) * TPR + s];
      if (HAS_NORM) { t.y += red[(grp * NV + NA + gl / R) * TPR + s]; }
    }
  }
  return t;
}
