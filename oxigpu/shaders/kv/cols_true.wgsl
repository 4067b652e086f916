// kv/cols_false.wgsl's interface over caches of which one or both are block-quantized (llama.cpp's
// -ctk/-ctv): rows of words, each cache read through its type's snippet (kv/<type>.wgsl), every vec4
// column dequantized as it is loaded. Defines: CTK, CTV (types), KROW, VROW (words per cache row).
#include "kv/{{CTK}}.wgsl"
#include "kv/{{CTV}}.wgsl"
alias KW = u32;
alias KRaw = vec4<f32>;
alias VRaw = vec4<f32>;

fn k_raw(row: u32, kvh: u32, c: u32) -> KRaw {
  let e = 4u * (kvh * D4 + c);
  let a = {{CTK}}_at(e) + vec3<u32>(row * {{KROW}}u);
  return {{CTK}}_get4(cache_k[a.x], cache_k[a.y], cache_k[a.z], e);
}

fn v_raw(row: u32, kvh: u32, c: u32) -> VRaw {
  let e = 4u * (kvh * DV4 + c);
  let a = {{CTV}}_at(e) + vec3<u32>(row * {{VROW}}u);
  return {{CTV}}_get4(cache_v[a.x], cache_v[a.y], cache_v[a.z], e);
}

fn widen_k(x: KRaw) -> vec4<f32> { return x; }
fn widen_v(x: VRaw) -> vec4<f32> { return x; }
