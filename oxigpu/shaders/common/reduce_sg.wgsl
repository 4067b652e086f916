// Sum ROWS per-thread partials over a WG-thread workgroup with subgroup adds (one shared-memory hop
// between subgroups). The includer defines WG and ROWS and takes `lane: Lane` as an entry input.
// Assumes subgroups are contiguous runs of local_invocation_index (true of 1-D workgroups on
// Vulkan/Metal/D3D12 drivers in practice); the test suite checks it on each device it runs on.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
  @builtin(subgroup_invocation_id) sg_lane: u32,
  @builtin(subgroup_size) sg_size: u32,
}

var<workgroup> red: array<f32, WG * ROWS>;

// Returns the total of row `lane.lid` for threads lid < ROWS (other threads get garbage).
fn sum_rows(lane: Lane, acc: array<f32, ROWS>) -> f32 {
  let sg = lane.lid / lane.sg_size;
  let n_sg = (WG + lane.sg_size - 1u) / lane.sg_size;
  for (var r = 0u; r < ROWS; r++) {
    let v = subgroupAdd(acc[r]);
    if (lane.sg_lane == 0u) { red[r * WG + sg] = v; }
  }
  workgroupBarrier();
  var t = 0.0;
  if (lane.lid < ROWS) {
    for (var i = 0u; i < n_sg; i++) { t += red[lane.lid * WG + i]; }
  }
  return t;
}
