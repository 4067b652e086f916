// Sum ROWS per-thread partials over a WG-thread workgroup (WG a power of two) with a shared-memory
// tree; the fallback where subgroups are missing. Same interface as reduce_sg.wgsl.

struct Lane {
  @builtin(local_invocation_index) lid: u32,
}

var<workgroup> red: array<f32, WG * ROWS>;

// Returns the total of row `lane.lid` for threads lid < ROWS (other threads get garbage).
fn sum_rows(lane: Lane, acc: array<f32, ROWS>) -> f32 {
  for (var r = 0u; r < ROWS; r++) { red[r * WG + lane.lid] = acc[r]; }
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lane.lid < s) {
      for (var r = 0u; r < ROWS; r++) { red[r * WG + lane.lid] += red[r * WG + lane.lid + s]; }
    }
    workgroupBarrier();
  }
  return red[min(lane.lid, ROWS - 1u) * WG];
}
