// gemm_mmv.wgsl's x source from f32 (gemm_mmv/x_f32.wgsl) without the matrix units, so that software adapters
// check it (tests/test_kernel_gemm.py test_mmv_x_f32): workgroup b of 32 lanes fetches and rounds block b (XS
// steps of 128 k from step XS b) of the 16 rows as the kernel does, into OUT [16][k / 8] (each 4 k as k0 k2 k1
// k3; zeros past n_tokens).
enable f16;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"

@group(0) @binding(9) var<storage, read_write> OUT: array<vec4<u32>>;

const S: u32 = 1u;
const XS: u32 = {{XS}}u;
const XW: u32 = 256u * XS;
const XPL: u32 = 8u * XS;

// gemm_mmv_stage.wgsl's w2: naga has no bitcast from vec2<f16> (the same bits).
fn w2(v: vec2<f16>) -> u32 { return pack2x16float(vec2<f32>(v)); }

#include "gemm_mmv/x_f32.wgsl"

@compute @workgroup_size(32)
fn main(@builtin(local_invocation_index) e: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  fetch_x(XS * wid.x, e);
  for (var i = 0u; i < XPL; i++) {
    let w = e + 32u * i;
    let c = 16u * XS * wid.x + w % (16u * XS);
    if (c < D.k / 8u) { OUT[(w / (16u * XS)) * (D.k / 8u) + c] = x_word(i); }
  }
}
