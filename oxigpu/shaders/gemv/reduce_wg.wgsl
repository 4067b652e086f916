// Row totals of a GEMV group (TPR lanes, R rows, plus the x^2 sum under HAS_NORM; TPR a power of two)
// by a shared-memory tree: the fallback where subgroups are missing. Same interface as reduce_sg.wgsl.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
}

const NV: u32 = select(R, R + 1u, HAS_NORM);   // values reduced per group
var<workgroup> red: array<f32, WG * NV>;

fn group_sum(lane: Lane, grp: u32, gl: u32, acc: array<f32, 8>, ss: f32) -> vec2<f32> {
  let base = grp * NV * TPR;
  for (var r = 0u; r < R; r++) { red[base + r * TPR + gl] = acc[r]; }
  if (HAS_NORM) { red[base + R * TPR + gl] = ss; }
  workgroupBarrier();
  for (var s = TPR / 2u; s > 0u; s >>= 1u) {
    if (gl < s) {
      for (var r = 0u; r < NV; r++) { red[base + r * TPR + gl] += red[base + r * TPR + gl + s]; }
    }
    workgroupBarrier();
  }
  return vec2<f32>(red[base + min(gl, R - 1u) * TPR], red[base + (NV - 1u) * TPR]);
}
