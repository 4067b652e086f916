// The contiguous form of common/paged_true.wgsl: one sequence at positions P.pos + t, logical cache row
// j at row j (plans built before block tables; no bindings).
fn pos_of(t: u32) -> u32 { return P.pos + t; }
fn seq_of(t: u32) -> u32 { return 0u; }
fn phys(s: u32, j: u32) -> u32 { return j; }
fn phys8(s: u32, a: vec4<u32>, b: vec4<u32>) -> array<vec4<u32>, 2> { return array<vec4<u32>, 2>(a, b); }
