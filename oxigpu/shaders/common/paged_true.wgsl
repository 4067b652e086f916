// Where a step's rows and their cache rows are (the batching contract, graph/ir.py): row t is at
// position positions[t] of the sequence in slot row_seq[t], whose logical cache row j lives at physical
// row block_table[s, j / KVB] * KVB + j % KVB. Rows of a sequence are contiguous and in position order.
// Physical rows are clamped into the pool, so a wrong table reads or writes the wrong rows of this cache,
// never another buffer. Defines: MB (block-table width), KVB (rows per block), CROWS (pool rows), and
// POS_B, SEQ_B, BT_B (the three inputs' bindings).
const MB: u32 = {{MB}}u;
const KVB: u32 = {{KVB}}u;
const CROWS: u32 = {{CROWS}}u;
@group(0) @binding({{POS_B}}) var<storage, read> positions: array<i32>;
@group(0) @binding({{SEQ_B}}) var<storage, read> row_seq: array<i32>;
@group(0) @binding({{BT_B}}) var<storage, read> block_table: array<i32>;

fn pos_of(t: u32) -> u32 { return u32(positions[t]); }
fn seq_of(t: u32) -> u32 { return u32(row_seq[t]); }

// The physical cache row of logical row j of slot s.
fn phys(s: u32, j: u32) -> u32 { return min(u32(block_table[s * MB + j / KVB]) * KVB + j % KVB, CROWS - 1u); }

// Physical rows of eight logical rows of slot s that lie in at most two blocks (keys j0 .. j0 + 7, some
// clamped to a last one: a decode attention pass): two table loads, one address where the pass does not
// cross a block.
fn phys8(s: u32, a: vec4<u32>, b: vec4<u32>) -> array<vec4<u32>, 2> {
  let b1 = b.w / KVB;
  let e0 = u32(block_table[s * MB + a.x / KVB]) * KVB;
  let e1 = u32(block_table[s * MB + b1]) * KVB;
  let kb = vec4<u32>(KVB);
  let top = vec4<u32>(CROWS - 1u);
  return array<vec4<u32>, 2>(min(select(vec4<u32>(e0), vec4<u32>(e1), a / kb == vec4<u32>(b1)) + a % kb, top),
                             min(select(vec4<u32>(e0), vec4<u32>(e1), b / kb == vec4<u32>(b1)) + b % kb, top));
}
