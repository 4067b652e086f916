// Per-step values, written once per step by the runtime (python: oxigpu.backends.wgpu.device.Params).
// Fixed at group 0, binding 0 in every kernel that reads step values; data bindings start at 1.
struct Params {
  pos: u32, n_tokens: u32, seed: u32, counter: u32,
  top_k: u32, penalty_last_n: u32, flags: u32, n_seqs: u32,
  temperature: f32, top_p: f32, min_p: f32, repeat_penalty: f32,
  presence_penalty: f32, frequency_penalty: f32, _r1: f32, _r2: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
