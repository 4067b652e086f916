// gemm_mmv.wgsl's weight loaders (gemm_mmv/<type>.wgsl) without the matrix units, so that software adapters
// check them (tests/test_kernel_gemm.py test_mmv_loader): workgroup (row block, step) of 32 lanes fetches and
// stages one step of 16 rows as the kernel does, into OUT [rows][k / 8] (each 4 k as k0 k2 k1 k3).
enable f16;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"

@group(0) @binding(9) var<storage, read_write> OUT: array<vec4<u32>>;

var<private> row0: u32;
var<private> step: u32;

fn put_w(r: u32, kh: u32, v: vec4<u32>) {
  if (row0 + r < D.rows) { OUT[(row0 + r) * (D.k / 8u) + 16u * step + kh / 8u] = v; }
}

// gemm_mmv.wgsl's h2 and w2 in forms naga takes (it has no bitcast to or from vec2<f16>): the same bits.
fn h2(u: u32) -> vec2<f16> { return vec2<f16>(unpack2x16float(u)); }
fn w2(v: vec2<f16>) -> u32 { return pack2x16float(vec2<f32>(v)); }

#include "gemm_mmv/{{WLOAD}}.wgsl"

@compute @workgroup_size(32)
fn main(@builtin(local_invocation_index) e: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  row0 = 16u * wid.x;
  step = wid.y;
  ur = load_w(row0 + e / 2u, step, e);
  stage_w(step, e);
}
