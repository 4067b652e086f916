// Row-group reductions of attention.wgsl's prefill through workgroup memory: every lane of the NKL
// consecutive lanes of a row group gets the group's max / sum of v (4 rows in the components). One
// barrier: the caller's next write to `red` comes after a later barrier (the kernel's per-tile ones).
// The includer defines NKL and THR.

var<workgroup> red: array<vec4<f32>, THR>;

fn wg_max(lid: u32, v: vec4<f32>) -> vec4<f32> {
  red[lid] = v;
  workgroupBarrier();
  let b = lid / NKL * NKL;
  var t = red[b];
  for (var s = 1u; s < NKL; s++) { t = max(t, red[b + s]); }
  return t;
}

fn wg_sum(lid: u32, v: vec4<f32>) -> vec4<f32> {
  red[lid] = v;
  workgroupBarrier();
  let b = lid / NKL * NKL;
  var t = red[b];
  for (var s = 1u; s < NKL; s++) { t += red[b + s]; }
  return t;
}
