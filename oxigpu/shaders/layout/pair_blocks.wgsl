// A 2-aligned block type's GGUF bytes rearranged in place into the GPU's pairs (backends/wgpu/layout.py):
// [body 0][d 0][d 1][body 1]. Each pair moves only within its own words, so one invocation a pair needs no
// second buffer: for types whose d starts a block the first block turns its d to the end, for the rest the
// second block turns its d to the front. Grid-stride over dims.x pairs (the grid may be capped).
// Defines: QB (block bytes, 2 mod 4), D_FIRST.
@group(0) @binding(0) var<storage, read_write> w: array<u32>;
@group(0) @binding(1) var<uniform> dims: vec4<u32>;   // .x pairs

const QB: u32 = {{QB}}u;
const NW: u32 = QB / 2u;          // words a pair
const H: u32 = (QB - 2u) / 4u;    // the word that holds both d's once paired

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let threads = nwg.x * 256u;
  for (var p = gid.x; p < dims.x; p += threads) {
    let b = p * NW;
    if ({{D_FIRST}}) {   // [d0 body0][d1 body1] -> [body0 d0][d1 body1]: block 0 two bytes to the left
      let d0 = w[b] & 0xFFFFu;
      for (var i = 0u; i < H; i++) { w[b + i] = (w[b + i] >> 16u) | (w[b + i + 1u] << 16u); }
      w[b + H] = d0 | (w[b + H] & 0xFFFF0000u);
    } else {             // [body0 d0][body1 d1] -> [body0 d0][d1 body1]: block 1 two bytes to the right
      let d1 = w[b + NW - 1u] >> 16u;
      for (var i = NW - 1u; i > H; i--) { w[b + i] = (w[b + i - 1u] >> 16u) | (w[b + i] << 16u); }
      w[b + H] = (w[b + H] & 0xFFFFu) | (d1 << 16u);
    }
  }
}
