// Team sums of attention_decode.wgsl through workgroup memory: the fallback where subgroups are
// missing. Same interface as team_sg.wgsl; every call is two barriers (callers keep them uniform).
// The includer defines L and WG.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
}

var<workgroup> red: array<vec4<f32>, WG>;

fn team_setup(lane: Lane) -> u32 { return 1u; }

fn team_sum4(lane: Lane, sgs: u32, v: vec4<f32>) -> vec4<f32> {
  let t0 = lane.lid / L * L;
  red[lane.lid] = v;
  workgroupBarrier();
  var t = red[t0];
  for (var s = 1u; s < L; s++) { t += red[t0 + s]; }
  workgroupBarrier();
  return t;
}

fn team_sum1(lane: Lane, sgs: u32, v: f32) -> f32 { return team_sum4(lane, sgs, vec4<f32>(v, 0.0, 0.0, 0.0)).x; }
