// gemm_mmv.wgsl's x source from f32 (gemm_mmv/x_f32.wgsl) without the matrix units, so that software adapters
// check it (tests/test_kernel_gemm.py test_mmv_x_f32): workgroup t of 32 lanes fetches and rounds step t's 16
// rows x 128 k as the kernel does, into OUT [16][k / 8] (each 4 k as k0 k2 k1 k3; zeros past n_tokens).
enable f16;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"

@group(0) @binding(9) var<storage, read_write> OUT: array<vec4<u32>>;

const S: u32 = 1u;
const XPL: u32 = 8u;

// gemm_mmv_stage.wgsl's w2: naga has no bitcast from vec2<f16> (the same bits).
fn w2(v: vec2<f16>) -> u32 { return pack2x16float(vec2<f32>(v)); }

#include "gemm_mmv/x_f32.wgsl"

@compute @workgroup_size(32)
fn main(@builtin(local_invocation_index) e: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  fetch_x(wid.x, e);
  for (var i = 0u; i < XPL; i++) {
    let w = e + 32u * i;
    OUT[(w / 16u) * (D.k / 8u) + 16u * wid.x + w % 16u] = x_word(i);
  }
}
