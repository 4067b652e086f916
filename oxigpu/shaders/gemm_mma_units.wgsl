// The matrix-unit GEMM's weight staging alone (gemm_mma/<WLOAD>.wgsl): workgroup n stages weight row n's
// units into workgroup memory as gemm_mma.wgsl does, then writes the row's halves to Y as f32. A check of
// the loaders on adapters without subgroup matrices (tests/test_kernel_gemm.py); not used by the engine.
enable f16;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "common/gemm_id_false.wgsl"

const KMAX: u32 = {{KMAX}}u;
const WST: u32 = {{WST}}u;     // distance of a row's consecutive k in ws (gemm_mma.wgsl's; > 1: transposed)
var<workgroup> ws: array<f16, KMAX * WST>;

#include "gemm_mma/{{WLOAD}}.wgsl"

// gemm_mma.wgsl's h2 (a word's two halves) in a form naga takes (it has no bitcast to vec2<f16>): the
// same values, exactly.
fn h2(u: u32) -> vec2<f16> { return vec2<f16>(unpack2x16float(u)); }

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let n = wid.x;
  for (var u = lid; u < D.k / WU; u += 64u) { w_put(u * WU * WST, w_load(n, u)); }
  workgroupBarrier();
  for (var e = lid; e < D.k; e += 64u) { Y[n * D.k + e] = f32(ws[e * WST]); }
}
