// Team reductions of attention_decode.wgsl through workgroup memory: the fallback where subgroups are
// missing. Same interface as team_sg.wgsl; every call is two barriers (callers keep them uniform).
// The includer defines L, NT, NS and RED (>= NT * L * NS).

struct Lane {
  @builtin(local_invocation_index) lid: u32,
}

var<workgroup> red: array<f32, RED>;

fn team_setup(lane: Lane) -> u32 { return 1u; }

fn team_sum(lane: Lane, sgs: u32, v: ptr<function, array<f32, NS>>) {
  let team = lane.lid / L;
  for (var i = 0u; i < NS; i++) { red[lane.lid * NS + i] = (*v)[i]; }
  workgroupBarrier();
  for (var i = 0u; i < NS; i++) {
    var t = 0.0;
    for (var s = 0u; s < L; s++) { t += red[(team * L + s) * NS + i]; }
    (*v)[i] = t;
  }
  workgroupBarrier();
}

fn team_red1(lane: Lane, x: f32, is_max: bool) -> f32 {
  let team = lane.lid / L;
  red[lane.lid] = x;
  workgroupBarrier();
  var t = red[team * L];
  for (var s = 1u; s < L; s++) {
    let y = red[team * L + s];
    t = select(t + y, max(t, y), is_max);
  }
  workgroupBarrier();
  return t;
}

fn team_sum1(lane: Lane, sgs: u32, x: f32) -> f32 { return team_red1(lane, x, false); }

fn team_max1(lane: Lane, sgs: u32, x: f32) -> f32 { return team_red1(lane, x, true); }
