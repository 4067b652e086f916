// Team reductions of attention_decode.wgsl with subgroup shuffles: a team is L consecutive invocations
// (L a power of two). An xor butterfly sums inside min(L, subgroup size) lanes; only where the subgroup
// is narrower than the team (e.g. an 8-wide CPU device and L = 32) a shared-memory hop joins the
// sub-teams (`sgs` is workgroup-uniform, so that branch and its barriers are too). Every lane of a team
// ends with bit-identical totals (x + y == y + x at each butterfly level; the hop sums in one order).
// Assumes subgroups are contiguous, aligned runs of local_invocation_index (as gemv/reduce_sg.wgsl does).
// The includer defines L, NT, NS and RED (>= NT * L / 4 * NS: WebGPU subgroups have >= 4 lanes).

struct Lane {
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_size) sg_size: u32,
}

var<workgroup> red: array<f32, RED>;
var<workgroup> sgs_w: u32;

// The subgroup width, workgroup-uniform (invocation 0's; every subgroup of a 1-D workgroup has it).
fn team_setup(lane: Lane) -> u32 {
  if (lane.lid == 0u) { sgs_w = lane.sg_size; }
  return workgroupUniformLoad(&sgs_w);
}

// The sub-team totals (one per c lanes) of NS values, summed across the team through `red`.
fn hop_sum(lane: Lane, c: u32, v: ptr<function, array<f32, NS>>) {
  let team = lane.lid / L;
  let tl = lane.lid % L;
  let n = L / c;
  if (tl % c == 0u) {
    for (var i = 0u; i < NS; i++) { red[(team * n + tl / c) * NS + i] = (*v)[i]; }
  }
  workgroupBarrier();
  for (var i = 0u; i < NS; i++) {
    var t = 0.0;
    for (var s = 0u; s < n; s++) { t += red[(team * n + s) * NS + i]; }
    (*v)[i] = t;
  }
  workgroupBarrier();
}

fn hop1(lane: Lane, c: u32, x: f32, is_max: bool) -> f32 {
  let team = lane.lid / L;
  let tl = lane.lid % L;
  let n = L / c;
  if (tl % c == 0u) { red[team * n + tl / c] = x; }
  workgroupBarrier();
  var t = red[team * n];
  for (var s = 1u; s < n; s++) {
    let y = red[team * n + s];
    t = select(t + y, max(t, y), is_max);
  }
  workgroupBarrier();
  return t;
}

// Sum NS values over the team, in place.
fn team_sum(lane: Lane, sgs: u32, v: ptr<function, array<f32, NS>>) {
  let c = min(L, sgs);
  for (var m = 1u; m < c; m <<= 1u) {
    for (var i = 0u; i < NS; i++) { (*v)[i] += subgroupShuffleXor((*v)[i], m); }
  }
  if (c < L) { hop_sum(lane, c, v); }
}

fn team_sum1(lane: Lane, sgs: u32, x: f32) -> f32 {
  let c = min(L, sgs);
  var t = x;
  for (var m = 1u; m < c; m <<= 1u) { t += subgroupShuffleXor(t, m); }
  if (c < L) { t = hop1(lane, c, t, false); }
  return t;
}

fn team_max1(lane: Lane, sgs: u32, x: f32) -> f32 {
  let c = min(L, sgs);
  var t = x;
  for (var m = 1u; m < c; m <<= 1u) { t = max(t, subgroupShuffleXor(t, m)); }
  if (c < L) { t = hop1(lane, c, t, true); }
  return t;
}
