// Row-group reductions of attention.wgsl's prefill without subgroups: workgroup memory only.

#include "attention/prefill_red.wgsl"

struct Lane {
  @builtin(local_invocation_index) lid: u32,
}

fn red_setup(lane: Lane) -> u32 { return 0u; }

fn red_max(lane: Lane, sgs: u32, v: vec4<f32>) -> vec4<f32> { return wg_max(lane.lid, v); }

fn red_sum(lane: Lane, sgs: u32, v: vec4<f32>) -> vec4<f32> { return wg_sum(lane.lid, v); }
