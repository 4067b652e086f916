"""Every tensor of the real models: our dequantization equals gguf.quants.dequantize bit for bit.

Files are opened with gguf.GGUFReader so this test depends only on the quant package. Most of
the runtime is the gguf package's own (slow) reference dequantizers.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader
from gguf import quants as gguf_quants

from oxigpu.quant import dequantize, dequantize_rows

ROWS_PER_CHUNK = 16384  # bounds peak memory: a 262,144-row embedding is compared in slices


@pytest.fixture(scope="module")
def gemma3_reader(gemma3_path) -> GGUFReader:
    """One reader per file: GGUFReader parses the 262,144-entry vocab item by item (seconds)."""
    return GGUFReader(gemma3_path)


def _check_file(reader: GGUFReader) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in reader.tensors:
        raw = t.data.reshape(-1, t.data.shape[-1]) if t.data.ndim > 1 else t.data.reshape(1, -1)
        for s in range(0, raw.shape[0], ROWS_PER_CHUNK):
            chunk = raw[s:s + ROWS_PER_CHUNK]
            ref = gguf_quants.dequantize(chunk, t.tensor_type)
            ours = dequantize(chunk, int(t.tensor_type))
            assert ours.shape == ref.shape, t.name
            assert np.array_equal(ours.view(np.uint32), np.ascontiguousarray(ref).view(np.uint32)), t.name
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return counts


@pytest.mark.realmodel
@pytest.mark.slow
def test_gemma3_every_tensor_bit_exact(gemma3_reader):
    assert _check_file(gemma3_reader) == {"Q8_0": 10, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9, "F32": 109}


@pytest.mark.realmodel
@pytest.mark.slow
def test_qwen_every_tensor_bit_exact(qwen_path):
    assert _check_file(GGUFReader(qwen_path)) == {"Q8_0": 13, "Q5_0": 133, "Q4_K": 12, "Q6_K": 12, "F32": 121}


@pytest.mark.realmodel
def test_embedding_row_gather(gemma3_reader):
    """Token lookups read rows of the 262,144 x 640 Q8_0 embedding without dequantizing it."""
    emb = next(t for t in gemma3_reader.tensors if t.name == "token_embd.weight")
    assert emb.data.shape == (262144, 680)
    ids = np.array([2, 0, 262143, 106, 2])
    ref = gguf_quants.dequantize(np.ascontiguousarray(emb.data[ids]), emb.tensor_type)
    got = dequantize_rows(emb.data, int(emb.tensor_type), ids)
    assert got.shape == (5, 640) and np.count_nonzero(got) > 0
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
