// A decode batch runs all its steps in one compute pass: before step j's kernels, this copies step j's
// Params (from the batch's staging buffer, bound at j's slot) into the params buffer, which the kernels
// read as their uniform (common/params.wgsl), and each row's position into the decode plan's positions
// input: its position at the stream's first step (base) plus the step's offset (Params.pos), for the
// n_tokens valid rows. A copy command instead ends the pass: a pass boundary and a transfer per step
// (~3 % of a small model's decode step). Defines: T (rows of the plan).
@group(0) @binding(1) var<storage, read> src: array<u32, 16>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32, 16>;
@group(0) @binding(3) var<storage, read_write> positions: array<i32>;
@group(0) @binding(4) var<storage, read> base: array<i32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) i: u32) {
  if (i < 16u) { dst[i] = src[i]; }
  let n = min(src[1], {{T}}u);
  for (var t = i; t < n; t += 64u) {
    positions[t] = base[t] + i32(src[0]);
  }
}
