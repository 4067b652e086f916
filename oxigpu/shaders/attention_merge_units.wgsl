// The matrix-unit prefill attention's key units (attention/mma_out_true.wgsl) folded into each output:
// O = sum_u e^(m_u - M) O_u / sum_u e^(m_u - M) l_u over the units that saw keys (l_u > 0), in unit
// order, M their largest reference maximum. One invocation per output element.
// Defines: NU (units), TRW (T * NH rows), NH, DV.
#include "common/params.wgsl"
#include "math.wgsl"

@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

const NU: u32 = {{NU}}u;
const TRW: u32 = {{TRW}}u;
const NH: u32 = {{NH}}u;
const DV: u32 = {{DV}}u;
const ML: u32 = NU * TRW * DV;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * 64u + gid.x;
  if (i >= TRW * DV) { return; }
  let r = i / DV;
  if (r / NH >= P.n_tokens) {          // padding rows: zeros, as the kernel without units writes them
    dst[i] = 0.0;
    return;
  }
  var mx = NEG_BIG;
  for (var u = 0u; u < NU; u++) {
    let j = ML + 2u * (u * TRW + r);
    if (part[j + 1u] > 0.0) { mx = max(mx, part[j]); }
  }
  var num = 0.0;
  var den = 0.0;
  for (var u = 0u; u < NU; u++) {
    let j = ML + 2u * (u * TRW + r);
    let l = part[j + 1u];
    if (l > 0.0) {
      let w = exp(part[j] - mx);
      num += w * part[(u * TRW + r) * DV + i % DV];
      den += w * l;
    }
  }
  var o = 0.0;
  if (den > 0.0) { o = num / den; }
  dst[i] = o;
}
