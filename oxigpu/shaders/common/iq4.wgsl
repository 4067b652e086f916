// ggml's 16-entry codebook kvalues_iq4nl (IQ4_NL, IQ4_XS), as int8 bytes of four words. Looked up by
// selects on the index's high bits and a shift, not by indexing a constant array at run time.
const IQ4K0: u32 = 0xBFAD9881u;   // -127, -104, -83, -65
const IQ4K1: u32 = 0xF6EADDCFu;   //  -49,  -35, -22, -10
const IQ4K2: u32 = 0x26190D01u;   //    1,   13,  25,  38
const IQ4K3: u32 = 0x71594535u;   //   53,   69,  89, 113

// The codebook words holding the four indices i (each < 16), and each value's bit offset in its word.
fn iq4_words(i: vec4<u32>) -> vec4<u32> {
  return select(select(vec4<u32>(IQ4K0), vec4<u32>(IQ4K1), i >= vec4<u32>(4u)),
                select(vec4<u32>(IQ4K2), vec4<u32>(IQ4K3), i >= vec4<u32>(12u)), i >= vec4<u32>(8u));
}

// kvalues[i] for four indices, as f32.
fn iq4v(i: vec4<u32>) -> vec4<f32> {
  let w = iq4_words(i);
  return vec4<f32>((bitcast<vec4<i32>>(w << (vec4<u32>(24u) - 8u * (i & vec4<u32>(3u))))) >> vec4<u32>(24u));
}

// kvalues[i] for four indices, packed as int8 (byte 0 = i.x): for the integer-dot loaders.
fn iq4p(i: vec4<u32>) -> u32 {
  let b = (iq4_words(i) >> (8u * (i & vec4<u32>(3u)))) & vec4<u32>(0xFFu);
  return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}
