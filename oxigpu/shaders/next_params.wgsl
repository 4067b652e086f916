// A decode batch runs all its steps in one compute pass: before step j's kernels, this copies step j's
// Params (from the batch's staging buffer, bound at j's slot) into the params buffer, which the kernels
// read as their uniform (common/params.wgsl). A copy command instead ends the pass: a pass boundary and
// a transfer per step (~3 % of a small model's decode step).
@group(0) @binding(1) var<storage, read> src: array<u32, 16>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32, 16>;

@compute @workgroup_size(16)
fn main(@builtin(local_invocation_index) i: u32) {
  dst[i] = src[i];
}
