// Row totals of a GEMV group (TPR lanes, NA = R x XR sums, plus XR x^2 sums under HAS_NORM; TPR a power of two)
// by a shared-memory tree: the fallback where subgroups are missing. Same interface as reduce_sg.wgsl.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
}

const NV: u32 = select(NA, NA + XR, HAS_NORM);   // values reduced per group
var<workgroup> red: array<f32, WG * NV>;

fn group_sum(lane: Lane, grp: u32, gl: u32, acc: array<f32, NVA>) -> vec2<f32> {
  let base = grp * NV * TPR;
  for (var r = 0u; r < NV; r++) { red[base + r * TPR + gl] = acc[r]; }
  workgroupBarrier();
  for (var s = TPR / 2u; s > 0u; s >>= 1u) {
    if (gl < s) {
      for (var r = 0u; r < NV; r++) { red[base + r * TPR + gl] += red[base + r * TPR + gl + s]; }
    }
    workgroupBarrier();
  }
  let a = min(gl, NA - 1u);
  var t = vec2<f32>(red[base + a * TPR], 0.0);
  if (HAS_NORM) { t.y = red[base + (NA + a / R) * TPR]; }
  return t;
}
