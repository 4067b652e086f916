// The prefill kernels' row tiles where every step holds one sequence (TILES false: contiguous plans, and
// paged plans of one slot; attention/tiles_true.wgsl has them): never called, the kernels take fixed
// blocks of BQ rows.
const tile_seq: u32 = 0u;
fn one_seq() -> bool { return true; }
fn find_tile(lid: u32, wi: u32) -> vec3<u32> { return vec3<u32>(0u); }
fn in_tile(rg: u32) -> bool { return true; }
fn tile_keys(r: vec3<u32>) -> vec2<u32> { return vec2<u32>(0u); }
