// Row totals of a GEMV group (TPR lanes, R rows; TPR a power of two) by a shared-memory tree: the
// fallback where subgroups are missing. Same interface as reduce_sg.wgsl.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
}

var<workgroup> red: array<f32, WG * R>;

fn group_sum(lane: Lane, grp: u32, gl: u32, acc: array<f32, 8>) -> f32 {
  let base = grp * R * TPR;
  for (var r = 0u; r < R; r++) { red[base + r * TPR + gl] = acc[r]; }
  workgroupBarrier();
  for (var s = TPR / 2u; s > 0u; s >>= 1u) {
    if (gl < s) {
      for (var r = 0u; r < R; r++) { red[base + r * TPR + gl] += red[base + r * TPR + gl + s]; }
    }
    workgroupBarrier();
  }
  return red[base + min(gl, R - 1u) * TPR];
}
