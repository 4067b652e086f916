// Per-step values, written once per step by the runtime (python: oxigpu.backends.wgpu.device.Params).
// Fixed at group 0, binding 0 in every kernel that reads step values; data bindings start at 1.
struct Params {
  pos: u32, n_tokens: u32, _r0: u32, _r1: u32,
  _r2: vec4<u32>, _r3: vec4<u32>, _r4: vec4<u32>,
}
@group(0) @binding(0) var<uniform> P: Params;
