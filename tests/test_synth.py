"""oxigpu.synth: determinism, loadability of every tiny shape x type, llama.cpp's Q4_K_M rules, vocab sanity."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from oxigpu.cli.main import cli
from oxigpu.errors import InvalidParameterError
from oxigpu.gguf import GGUFFile
from oxigpu.models.hparams import HParams
from oxigpu.quant import dequantize
from oxigpu.synth import SHAPES, Mix, plan_tensors, synthesize, use_more_bits
from oxigpu.synth.vocab import BYTE, CONTROL, build_vocab

TINY = [name for name in SHAPES if name.startswith("tiny-")]
TYPES = ["Q4_K_M", "Q8_0", "Q4_0", "Q6_K", "F16", "BF16"]
MORE_TYPES = ["Q5_K_M", "Q4_1", "Q5_1", "Q5_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "F32"]


@pytest.fixture(scope="session")
def tiny_q4km(tmp_path_factory):
    """Each tiny shape written once as Q4_K_M (seed 0)."""
    d = tmp_path_factory.mktemp("synth")
    return {name: synthesize(name, d / f"{name}.gguf", "Q4_K_M", seed=0).path for name in TINY}


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = synthesize("tiny-qwen2", tmp_path / "a.gguf", "Q4_K_M", seed=7).path.read_bytes()
    b = synthesize("tiny-qwen2", tmp_path / "b.gguf", "Q4_K_M", seed=7, workers=1).path.read_bytes()
    c = synthesize("tiny-qwen2", tmp_path / "c.gguf", "Q4_K_M", seed=8).path.read_bytes()
    assert a == b
    assert len(a) == len(c) and a != c


@pytest.mark.parametrize("shape,ftype", [(s, t) for s in TINY for t in TYPES]
                         + [("tiny-gemma3", t) for t in MORE_TYPES])
def test_tiny_shape_loads_and_dequantizes_finitely(tmp_path, shape, ftype):
    r = synthesize(shape, tmp_path / "m.gguf", ftype, seed=1)
    with GGUFFile(r.path) as f:
        assert Counter(t.type_name for t in f.tensors.values()) == Counter(r.type_counts)
        assert sum(t.n_elements for t in f.tensors.values()) == r.n_params
        for t in f.tensors.values():
            x = dequantize(t.data, t.ggml_type)
            assert np.isfinite(x).all(), t.name
            if t.name.endswith("norm.weight"):
                assert abs(float(x.mean()) - 1.0) < 0.1, t.name
            elif len(t.ne) == 2:
                assert 0.015 < float(x.std()) < 0.025, t.name   # N(0, 0.02) after quantization
                rows = x.reshape(t.ne[1], t.ne[0])
                assert len(np.unique(rows[:64], axis=0)) == min(64, t.ne[1]), t.name  # distinct rows


@pytest.mark.parametrize("shape", TINY)
def test_hparams_match_the_shape(tiny_q4km, shape):
    s = SHAPES[shape]
    with GGUFFile(tiny_q4km[shape]) as f:
        hp = HParams.from_gguf(f)
        assert (hp.arch, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.n_vocab) == \
            (s.arch, s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.n_vocab)
        assert hp.tied_embeddings == s.tied == ("output.weight" not in f.tensors)
        assert hp.rope_base == s.rope_base and hp.sliding_window == s.sliding_window
        assert len(f.metadata["tokenizer.ggml.tokens"]) == s.n_vocab


def test_tiny_gemma3_has_global_layer_and_small_window(tiny_q4km):
    with GGUFFile(tiny_q4km["tiny-gemma3"]) as f:
        hp = HParams.from_gguf(f)
    assert [hp.is_sliding(i) for i in range(hp.n_layer)] == [True] * 5 + [False]
    assert hp.layer_rope_base(0) == 10000.0 and hp.layer_rope_base(5) == 1e6
    assert hp.sliding_window == 16 and hp.embed_scale == pytest.approx(320 ** 0.5)


def test_tiny_shapes_cover_both_block_paths():
    """Some weight rows are multiples of 256 (K-quant blocks), some are not (32-block fallbacks)."""
    kinds = Counter()
    for name in TINY:
        for p in plan_tensors(SHAPES[name], Mix("Q4_K_M")):
            if p.kind == "matrix":
                kinds[p.ne[0] % 256 == 0] += 1
                kinds[p.qtype] += 1
    assert kinds[True] and kinds[False]
    assert {"Q4_K", "Q6_K", "Q5_0", "Q8_0"} <= set(kinds)


def test_q4_k_m_rules_on_tiny_qwen2(tiny_q4km):
    # 3 layers: use_more_bits picks layer 2 only; rows of 256 take K-quants, rows of 640 fall back.
    with GGUFFile(tiny_q4km["tiny-qwen2"]) as f:
        ty = {n: t.type_name for n, t in f.tensors.items()}
    assert "output.weight" not in ty
    assert ty["token_embd.weight"] == "Q6_K"          # tied: takes the output rule
    assert ty["blk.0.attn_v.weight"] == "Q4_K" and ty["blk.2.attn_v.weight"] == "Q6_K"
    assert ty["blk.0.ffn_down.weight"] == "Q5_0"      # Q4_K -> Q5_0 (row 640)
    assert ty["blk.2.ffn_down.weight"] == "Q8_0"      # Q6_K -> Q8_0 (row 640)
    assert ty["blk.1.attn_q.weight"] == ty["blk.1.ffn_up.weight"] == "Q4_K"
    assert ty["blk.1.attn_q.bias"] == ty["blk.1.ffn_norm.weight"] == "F32"


def test_q4_k_m_rules_on_tiny_llama_untied(tiny_q4km):
    with GGUFFile(tiny_q4km["tiny-llama"]) as f:
        ty = {n: t.type_name for n, t in f.tensors.items()}
    assert ty["output.weight"] == "Q8_0"              # row 192: Q6_K -> Q8_0
    assert ty["token_embd.weight"] == "Q5_0"          # untied embedding: base type, Q4_K -> Q5_0
    assert ty["blk.1.ffn_down.weight"] == "Q6_K" and ty["blk.0.ffn_down.weight"] == "Q4_K"


def test_use_more_bits_matches_llama_cpp():
    assert [i for i in range(18) if use_more_bits(i, 18)] == [0, 1, 4, 7, 10, 13, 15, 16, 17]
    assert [i for i in range(24) if use_more_bits(i, 24)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]


def test_gemma3_270m_plan_reproduces_the_real_histogram():
    """Same counts as the real Q4_K_M package file (MODELS.md), without writing anything."""
    plan = plan_tensors(SHAPES["gemma3-270m"], Mix("Q4_K_M"))
    assert Counter(p.qtype for p in plan) == {"Q8_0": 10, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9, "F32": 109}


def test_iq4_xs_plan_follows_llama_quantize():
    """llama-quantize's IQ4_XS mix of the 8B (no importance matrix): attn_v Q5_K (4 query heads per KV
    head), the first 32/8 ffn_down Q5_K, the LM head Q6_K, the rest IQ4_XS (the counts of the file it wrote
    from our F16 8B, docs/perf-log.md)."""
    plan = {p.name: p.qtype for p in plan_tensors(SHAPES["llama-3.1-8b"], Mix("IQ4_XS"))}
    assert Counter(plan.values()) == {"IQ4_XS": 189, "Q5_K": 36, "Q6_K": 1, "F32": 66}
    assert plan["blk.3.ffn_down.weight"] == "Q5_K" and plan["blk.4.ffn_down.weight"] == "IQ4_XS"
    assert plan["token_embd.weight"] == "IQ4_XS" and plan["output.weight"] == "Q6_K"
    # rows of 896 hold no 256-blocks: IQ4_XS falls back to IQ4_NL, as llama.cpp's does
    assert Counter(p.qtype for p in plan_tensors(SHAPES["qwen2.5-0.5b"], Mix("IQ4_XS")))["IQ4_NL"] == 120
    # the IQ4_NL mix (32-blocks) there: its tied LM head's Q6_K falls back to Q8_0 too (rows hold no 256-block)
    nl = {p.name: p.qtype for p in plan_tensors(SHAPES["qwen2.5-0.5b"], Mix("IQ4_NL"))}
    assert nl["token_embd.weight"] == "Q8_0" and Counter(nl.values())["IQ4_NL"] > 100


@pytest.mark.realmodel
@pytest.mark.parametrize("fixture", ["gemma3_path", "qwen_path"])
def test_mix_rules_reproduce_real_q4_k_m_files(request, fixture):
    """llama.cpp's real Q4_K_M files: our rule gives every tensor the type llama-quantize gave it.

    llama-quantize counts attn_v/ffn_down layers in the order it walks the tensors. Current llama.cpp walks
    them in numeric layer order (the gemma3 file, and our rule); the older build that made the Qwen file
    walked them by name (blk.0, blk.1, blk.10, ...), so for that file we feed the rule the name rank.
    """
    with GGUFFile(request.getfixturevalue(fixture)) as f:
        n_layer = int(f.metadata[f"{f.arch}.block_count"])
        tied = "output.weight" not in f.tensors
        by_name = {str(i): r for r, i in enumerate(sorted(range(n_layer), key=str))}
        mix = Mix("Q4_K_M")
        for name, t in f.tensors.items():
            parts = name.split(".")
            if f.arch == "qwen2" and parts[0] == "blk":
                parts[1] = str(by_name[parts[1]])
            assert mix.tensor_type(".".join(parts), t.ne, n_layer, tied) == t.type_name, name


@pytest.mark.parametrize("shape", ["qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.2-1b", "llama-3.1-8b"])
def test_real_shape_plans(shape):
    s = SHAPES[shape]
    plan = {p.name: p for p in plan_tensors(s, Mix("Q4_K_M"))}
    n_params = sum(p.n_elements for p in plan.values())
    expected = {"qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304, "llama-3.2-1b": 1_235_814_432,
                "llama-3.1-8b": 8_030_261_312}
    assert n_params == expected[shape]
    assert ("output.weight" in plan) == (not s.tied)
    assert ("rope_freqs.weight" in plan) == (s.arch == "llama")


def test_layers_option_cuts_the_shape(tmp_path):
    r = synthesize("tiny-gemma3", tmp_path / "g.gguf", "Q8_0", layers=2)
    with GGUFFile(r.path) as f:
        assert HParams.from_gguf(f).n_layer == 2
        assert "blk.1.ffn_down.weight" in f.tensors and not any(n.startswith("blk.2.") for n in f.tensors)


def test_rejects_unknown_shape_type_and_bad_layers(tmp_path):
    with pytest.raises(InvalidParameterError, match="known"):
        synthesize("tiny-mamba", tmp_path / "x.gguf")
    with pytest.raises(InvalidParameterError, match="Q4_K_M"):
        synthesize("tiny-llama", tmp_path / "x.gguf", "Q7_K")
    with pytest.raises(InvalidParameterError):
        synthesize("tiny-llama", tmp_path / "x.gguf", layers=0)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("style,n", [("bpe-qwen2", 151936), ("bpe-llama3", 128256), ("bpe-qwen2", 1280)])
def test_bpe_vocab_tokens_and_merges_agree(style, n):
    v = build_vocab(style, n, chat_template=True)
    tokens = set(v.tokens)
    assert len(tokens) == n == len(v.token_types)
    for m in v.merges:
        left, right = m.split(" ")
        assert left in tokens and right in tokens and left + right in tokens, m
    assert v.token_types[v.bos] == CONTROL and v.token_types[v.eos] == CONTROL
    assert v.tokens[v.eot] in ("<|im_end|>", "<|eot_id|>")


def test_real_bpe_layouts_put_specials_where_the_real_models_do():
    assert build_vocab("bpe-qwen2", 151936, True).tokens[151643:151646] == \
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    v = build_vocab("bpe-llama3", 128256, True)
    assert (v.tokens[128000], v.tokens[128009]) == ("<|begin_of_text|>", "<|eot_id|>")


@pytest.mark.parametrize("style", ["spm-llama2", "spm-gemma"])
def test_spm_vocab_has_byte_tokens_and_scores(style):
    v = build_vocab(style, 262144 if style == "spm-gemma" else 1024, chat_template=False)
    assert v.chat_template is None
    byte_ids = [i for i, t in enumerate(v.token_types) if t == BYTE]
    assert [v.tokens[i] for i in byte_ids] == [f"<0x{b:02X}>" for b in range(256)]
    assert len(set(v.tokens)) == len(v.tokens) and v.scores is not None and len(v.scores) == len(v.tokens)


def test_cli_synth_writes_and_reports(tmp_path):
    out = tmp_path / "t.gguf"
    res = CliRunner().invoke(cli, ["synth", "tiny-qwen3", "-o", str(out), "--type", "q8_0", "--seed", "5"])
    assert res.exit_code == 0, res.output
    assert "tiny-qwen3" in res.output and "Q8_0" in res.output and out.exists()
    bad = CliRunner().invoke(cli, ["synth", "tiny-qwen3", "-o", str(out), "--type", "Q9_9"])
    assert bad.exit_code != 0
