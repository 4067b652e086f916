"""`oxigpu info` and HParams: real-model histograms (MODELS.md), synthetic files, clean errors."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType, GGUFWriter

from oxigpu.cli.main import cli
from oxigpu.errors import GGUFFormatError, UnsupportedArchitectureError
from oxigpu.gguf import GGUFFile
from oxigpu.models import FAMILIES
from oxigpu.models.hparams import HParams
from oxigpu.synth import SHAPES, synthesize


def info_json(path) -> dict:
    res = CliRunner().invoke(cli, ["info", str(path), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def counts(info: dict) -> dict[str, int]:
    return {k: v["count"] for k, v in info["tensor_types"].items()}


@pytest.mark.realmodel
def test_info_gemma3_270m(gemma3_path):
    info = info_json(gemma3_path)
    assert counts(info) == {"Q8_0": 10, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9, "F32": 109}
    assert info["file_bytes"] == 253_113_024 and info["architecture"] == "gemma3"
    assert sum(v["bytes"] for v in info["tensor_types"].values()) < info["file_bytes"]
    hp = info["hparams"]
    assert (hp["n_layer"], hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["head_dim"], hp["n_ff"],
            hp["n_vocab"]) == (18, 640, 4, 1, 256, 2048, 262144)
    assert hp["tied_embeddings"] and hp["sliding_window"] == 512 and hp["rope_base_swa"] == 10000.0
    assert hp["sliding_layers"] == [i for i in range(18) if i % 6 != 5]
    tok = info["tokenizer"]
    assert (tok["model"], tok["vocab_size"], tok["bos"], tok["eos"], tok["add_bos"], tok["chat_template"]) == \
        ("llama", 262144, 2, 1, True, False)


@pytest.mark.realmodel
def test_info_qwen_05b(qwen_path):
    info = info_json(qwen_path)
    assert counts(info) == {"Q8_0": 13, "Q5_0": 133, "Q4_K": 12, "Q6_K": 12, "F32": 121}
    hp = info["hparams"]
    assert (hp["arch"], hp["n_layer"], hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["head_dim"]) == \
        ("qwen2", 24, 896, 14, 2, 64)
    assert hp["qkv_bias"] and not hp["tied_embeddings"] and hp["sliding_window"] is None
    tok = info["tokenizer"]
    assert (tok["model"], tok["pre"], tok["vocab_size"], tok["eos"], tok["add_bos"], tok["chat_template"]) == \
        ("gpt2", "qwen2", 151936, 151645, False, True)


@pytest.mark.realmodel
def test_gemma3_layers_follow_the_hard_coded_pattern(gemma3_path):
    with GGUFFile(gemma3_path) as f:
        hp = HParams.from_gguf(f)
    assert [i for i in range(hp.n_layer) if not hp.is_sliding(i)] == [5, 11, 17]
    assert hp.layer_rope_base(5) == 1e6 and hp.layer_rope_base(4) == 10000.0
    assert hp.attn_scale == pytest.approx(1 / 16) and hp.activation == "gelu_tanh" and hp.rope_neox


def test_info_on_synthetic_file_text_and_json(tmp_path):
    r = synthesize("tiny-qwen2", tmp_path / "q.gguf", "Q4_K_M", seed=0)
    info = info_json(r.path)
    assert counts(info) == r.type_counts
    assert info["n_params"] == r.n_params and info["file_bytes"] == r.file_bytes
    assert info["tokenizer"]["chat_template"] and info["tokenizer"]["merges"] > 0
    text = CliRunner().invoke(cli, ["info", str(r.path)])
    assert text.exit_code == 0 and "Q6_K" in text.output and "tied_embeddings" in text.output


def test_info_llama3_style_file_reports_rope_factors(tmp_path):
    shape = replace(SHAPES["llama-3.2-1b"], n_layer=1, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=2048)
    r = synthesize(shape, tmp_path / "l.gguf", "Q8_0")
    info = info_json(r.path)
    assert info["hparams"]["rope_freq_factors"] and info["hparams"]["tied_embeddings"]
    assert info["tokenizer"]["bos"] == 2048 - 256 and info["tokenizer"]["eot"] == 2048 - 256 + 9
    with GGUFFile(r.path) as f:
        factors = f.tensors["rope_freqs.weight"].data.view(np.float32).ravel()
    assert len(factors) == 32 and factors[0] == 1.0 and factors[-1] == 32.0
    assert np.all(np.diff(factors) >= 0)


@pytest.mark.parametrize("make", ["missing", "garbage", "directory"])
def test_info_errors_are_one_line(tmp_path, make):
    path = tmp_path / "m.gguf"
    if make == "garbage":
        path.write_bytes(b"not a gguf file at all")
    elif make == "directory":
        path.mkdir()
    res = CliRunner().invoke(cli, ["info", str(path)])
    assert res.exit_code != 0
    assert res.output.startswith("Error: ") and res.output.count("\n") == 1
    assert "Traceback" not in res.output


def _write_gguf(path, arch: str, **kv) -> None:
    w = GGUFWriter(path, arch)
    for k, v in kv.items():
        w.add_uint32(f"{arch}.{k}", v)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32), raw_dtype=GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_info_on_unsupported_arch_still_describes_the_file(tmp_path):
    path = tmp_path / "mamba.gguf"
    _write_gguf(path, "mamba", block_count=1)
    info = info_json(path)
    assert not info["supported"] and info["hparams"] is None
    assert ", ".join(FAMILIES) in info["unsupported_reason"]
    assert counts(info) == {"F32": 1}


def test_hparams_errors_and_defaults():
    with pytest.raises(UnsupportedArchitectureError, match="supported: " + ", ".join(FAMILIES)):
        HParams.from_metadata("mamba", {})
    with pytest.raises(GGUFFormatError, match="llama.block_count.*missing"):
        HParams.from_metadata("llama", {"llama.embedding_length": 64, "llama.attention.head_count": 4,
                                        "llama.feed_forward_length": 128, "llama.context_length": 256,
                                        "llama.vocab_size": 100})
    meta = {"qwen3.block_count": 2, "qwen3.embedding_length": 64, "qwen3.attention.head_count": 4,
            "qwen3.feed_forward_length": 128, "qwen3.context_length": 256,
            "qwen3.attention.head_count_kv": np.array([2, 2], dtype=np.uint32),
            "tokenizer.ggml.tokens": ["a", "b", "c"]}
    hp = HParams.from_metadata("qwen3", meta, ["token_embd.weight", "output.weight"])
    assert (hp.head_dim, hp.head_dim_v, hp.rope_dims, hp.n_head_kv, hp.n_gqa, hp.n_vocab) == (16, 16, 16, 2, 2, 3)
    assert not hp.tied_embeddings and hp.qk_norm == "head" and not hp.qkv_bias and not hp.is_sliding(0)
    with pytest.raises(GGUFFormatError, match="differs per layer"):
        HParams.from_metadata("qwen3", {**meta, "qwen3.attention.head_count_kv": np.array([2, 4])})
