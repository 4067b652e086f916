"""Hostile inputs, class by class (issue 29): every case ends in a clean OxigpuError (or simply works) within
5 s and 1 GiB of peak memory (`hostile_gguf.clean`), on numpy and, where the GPU is involved, on lavapipe.

Classes: budgets on everything a file controls (GGUF structure, vocabulary, merges, chat templates) and the
memory a load may take; one error family at the public entry points over tensor-shape fields and file
structure; files that change on disk under a loaded model; cheap checks before expensive work (prompt
length, vocabulary sizes, float32 ranges). Sampling, stop strings, chat turns, Ctrl-C, threads and
determinism are in test_reliability_runtime.py.
"""
from __future__ import annotations

import os
import shutil
import struct
import time

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from hostile_gguf import GGUFParts, Tensor, clean

from oxigpu import LLM, limits
from oxigpu.cli.main import cli
from oxigpu.errors import (
    ContextLengthError,
    DeviceError,
    GGUFError,
    GGUFFormatError,
    InvalidParameterError,
    OxigpuError,
    TemplateError,
    TokenizerError,
)
from oxigpu.gguf import GGUFFile
from oxigpu.tokenizer import Tokenizer

V = GGUFValueType
Q = GGMLQuantizationType


@pytest.fixture(scope="module")
def parts(tiny_models) -> dict[str, GGUFParts]:
    """Each tiny architecture's file, taken apart (copy before changing)."""
    return {name: GGUFParts.read(path) for name, path in tiny_models.items()}


def _sparse_string_file(path, n_bytes: int) -> None:
    """A GGUF whose one metadata string declares (and holds, sparsely) `n_bytes` bytes."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IQ", 8, n_bytes)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + n_bytes)    # a hole: no disk, no memory


# -- 1. budgets on what a file controls ----------------------------------------------------------------------
def _gguf_budget_cases(p: GGUFParts) -> dict[str, tuple]:
    """name -> (GGUFParts to write or a writer function, limit name, message fragment)."""
    n = limits.MAX_TENSORS + 1
    many_tensors = GGUFParts([["general.architecture", V.STRING, "llama"]],
                             [Tensor(f"t{i}", (1,), Q.F32, b"\0" * 4) for i in range(n)])
    many_keys = GGUFParts([[f"k.{i}", V.UINT8, 1] for i in range(limits.MAX_METADATA_KEYS + 1)])
    big_array = p.copy().set("x.array", (V.UINT8, np.zeros(limits.MAX_ARRAY_ITEMS + 1, np.uint8)), V.ARRAY)
    third = limits.MAX_ARRAY_ITEMS // 3 + 1
    nested = p.copy().set("x.nested", (V.ARRAY, [(V.UINT8, np.zeros(third, np.uint8))] * 3), V.ARRAY)
    return {
        "tensor count": (many_tensors, "MAX_TENSORS", f"{n} tensors exceed"),
        "metadata keys": (many_keys, "MAX_METADATA_KEYS", "metadata keys exceed"),
        "array elements": (big_array, "MAX_ARRAY_ITEMS", "array elements exceed"),
        "nested array elements": (nested, "MAX_ARRAY_ITEMS", "array elements exceed"),
        "stored merges": (p.copy().set("tokenizer.ggml.merges", (V.STRING, ["a b"] * (limits.MAX_ARRAY_ITEMS + 1))),
                          "MAX_ARRAY_ITEMS", "array elements exceed"),
        "string bytes": (lambda path: _sparse_string_file(path, limits.MAX_STRING_BYTES + 1), "MAX_STRING_BYTES",
                         "exceeds the limit"),
    }


GGUF_BUDGETS = ["tensor count", "metadata keys", "array elements", "nested array elements", "stored merges",
                "string bytes"]


@pytest.mark.parametrize("name", GGUF_BUDGETS)
def test_gguf_budgets_refuse_before_reading(parts, tmp_path, name):
    """Counts and sizes a file declares are checked against oxigpu.limits before anything is built; the
    files are built with the real limits (a sparse file for the 64 MiB string)."""
    source, limit, fragment = _gguf_budget_cases(parts["tiny-qwen2"])[name]
    path = tmp_path / "hostile.gguf"
    source(path) if callable(source) else source.write(path)
    for entry in (lambda: GGUFFile(path), lambda: LLM(path, backend="numpy", n_ctx=32)):
        out = clean(entry, name, seconds=5)
        assert isinstance(out.error, GGUFFormatError), out.error
        assert limit in str(out.error) and fragment in str(out.error) and str(path) in str(out.error)


def _with_tokens(p: GGUFParts, tokens: list[str]) -> GGUFParts:
    """`p` with another vocabulary (scores and types sized to match) and vocab_size kept consistent."""
    n = len(tokens)
    q = p.copy().set("tokenizer.ggml.tokens", (V.STRING, tokens))
    q.set("tokenizer.ggml.scores", (V.FLOAT32, np.zeros(n, np.float32)), V.ARRAY)
    q.set("tokenizer.ggml.token_type", (V.INT32, np.ones(n, np.int32)), V.ARRAY)
    return q


def _spm_square_attack(p: GGUFParts) -> GGUFParts:
    """A 3.8 MB SentencePiece-style vocabulary whose derived merges would take gigabytes: 'a' * k for k up
    to 2,400 splits into every (a * i, a * (k - i)), each half a token, and the pairs' text grows as k**3."""
    tokens = list(p.get("tokenizer.ggml.tokens")[1])
    return _with_tokens(p, tokens + ["a" * k for k in range(2, 2401) if "a" * k not in tokens])


TOKENIZER_BUDGETS = {
    "vocabulary size": (lambda p: _with_tokens(p, ["a"] * (limits.MAX_VOCAB + 1)), "MAX_VOCAB"),
    "token length": (lambda p: _with_tokens(p, list(p.get("tokenizer.ggml.tokens")[1][:-1])
                                            + ["x" * (limits.MAX_TOKEN_CHARS + 1)]), "MAX_TOKEN_CHARS"),
    "vocabulary characters": (lambda p: _with_tokens(p, ["y" * limits.MAX_TOKEN_CHARS]
                                                     * (limits.MAX_VOCAB_CHARS // limits.MAX_TOKEN_CHARS + 1)),
                              "MAX_VOCAB_CHARS"),
    "derived merges": (_spm_square_attack, "MAX_MERGE"),
}


@pytest.mark.parametrize("name", sorted(TOKENIZER_BUDGETS))
def test_tokenizer_budgets_refuse_before_building(parts, tmp_path, name):
    """Vocabulary budgets are checked before the tokenizer is built (the derived-merges file took 5.6 GB)."""
    make, limit = TOKENIZER_BUDGETS[name]
    path = make(parts["tiny-llama"]).write(tmp_path / "hostile.gguf")
    meta = GGUFFile(path).metadata
    out = clean(lambda: Tokenizer.from_metadata(meta), name, seconds=5)
    assert isinstance(out.error, TokenizerError) and limit in str(out.error), out.error
    out = clean(lambda: LLM(path, backend="numpy", n_ctx=32), name, seconds=5)
    assert isinstance(out.error, OxigpuError)


def test_stored_merges_budget_in_memory():
    """MAX_MERGES for stored merges (a file cannot hold more than MAX_ARRAY_ITEMS: the GGUF reader refuses
    first), shown on metadata built in memory."""
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
          "tokenizer.ggml.merges": ["a b"] * (limits.MAX_MERGES + 1)}
    out = clean(lambda: Tokenizer.from_metadata(md), "stored merges")
    assert isinstance(out.error, TokenizerError) and "MAX_MERGES" in str(out.error)


def test_one_vocabulary_limit_for_the_tokenizer_and_the_hyperparameters():
    """MAX_VOCAB bounds every reader of a vocabulary's size, the tokenizer's token list and HParams'
    vocab_size (or its token count where vocab_size is absent), so no file passes one and fails the other;
    the limit itself loads."""
    from oxigpu.models import HParams
    meta = {"llama.block_count": 2, "llama.embedding_length": 64, "llama.attention.head_count": 4,
            "llama.feed_forward_length": 128, "llama.context_length": 256}
    assert HParams.from_metadata("llama", {**meta, "llama.vocab_size": limits.MAX_VOCAB}).n_vocab == limits.MAX_VOCAB
    for n in (limits.MAX_VOCAB + 1, 2 * limits.MAX_VOCAB):
        with pytest.raises(GGUFFormatError, match=r"llama\.vocab_size.*MAX_VOCAB"):
            HParams.from_metadata("llama", {**meta, "llama.vocab_size": n})
    tokens = ["a"] * (limits.MAX_VOCAB + 1)
    with pytest.raises(GGUFFormatError, match=r"tokenizer\.ggml\.tokens.*MAX_VOCAB"):
        HParams.from_metadata("llama", {**meta, "tokenizer.ggml.tokens": tokens})
    with pytest.raises(TokenizerError, match="MAX_VOCAB"):
        Tokenizer.from_metadata({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens})


def _in_file(parts: GGUFParts, tmp_path, template) -> LLM:
    path = parts.copy().set("tokenizer.chat_template", template, V.STRING).write(tmp_path / "template.gguf")
    return LLM(path, backend="numpy", n_ctx=64)


TEMPLATE_BUDGETS = {
    "source size": ("{# #}" + " " * limits.MAX_TEMPLATE_CHARS, "MAX_TEMPLATE_CHARS"),
    "center width": ("{{ messages[0]['content'].center(10**9) }}", "could build"),
    "center width (folded at compile)": ("{{ 'x'|center(999999999) }}", "could build"),
    "ljust through a variable": ("{% set n = 999999999 %}{{ 'x'.ljust(n) }}", "could build"),
    "format width": ("{{ '{:>999999999}'.format(1) }}", "format width"),
    "percent width": ("{{ '%0999999999d' % 1 }}", "format width"),
    "format filter width": ("{{ '%0999999999d'|format(1) }}", "format width"),
    "replace amplification": ("{% set s = 'a' * 4000000 %}{{ s.replace('a', s) }}", "could build"),
    "join amplification": ("{% set s = 'a' * 4000000 %}{{ [s, s, s]|join(s) }}", "could build"),
    "expandtabs": ("{{ ('\t' * 100000).expandtabs(100000) }}", "could build"),
    "indent": ("{{ ('a\n' * 1000000)|indent(1000) }}", "could build"),
    "printing a list": ("{% set s = 'a' * 4000000 %}{{ [s, s, s, s, s] }}", "could build"),
    "integer growth": ("{% set ns = namespace(x=3) %}{% for i in range(100) %}{% set ns.x = ns.x * ns.x %}"
                       "{% endfor %}{{ ns.x }}", "integer"),
    "loops that call nothing": ("{% set s = 'a' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}"
                                "{% endfor %}", "MAX_RENDER_SECONDS"),
    "quadratic concatenation": ("{% set ns = namespace(s='') %}{% for i in range(1000000) %}"
                                "{% set ns.s = ns.s + 'abcdefgh' %}{% endfor %}", "MAX_RENDER_SECONDS"),
}


@pytest.mark.parametrize("name", sorted(TEMPLATE_BUDGETS))
def test_template_budgets_in_a_gguf_file(parts, tmp_path, name):
    """Render cost: time, output and every intermediate value, whatever builds it (methods, filters,
    operators, format strings, compile-time folding), from a template inside a model file."""
    template, fragment = TEMPLATE_BUDGETS[name]
    llm = _in_file(parts["tiny-qwen3"], tmp_path, template)     # loading never compiles the template
    out = clean(lambda: llm.chat([{"role": "user", "content": "hi"}], max_tokens=1), name, seconds=5)
    assert isinstance(out.error, TemplateError) and fragment in str(out.error), out.error
    assert llm.generate("still works", max_tokens=2, seed=1).token_ids


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-gemma3"])
def test_peak_memory_while_loading_is_bounded_by_the_file(tiny_models, name):
    """Loading takes at most twice the file plus the buffers the backend plans (weights as float32, KV
    cache, activations) plus 64 MiB."""
    path = tiny_models[name]
    out = clean(lambda: LLM(path, backend="numpy", n_ctx=256), name)
    assert out.error is None
    if out.peak_bytes is not None:
        planned = out.value._engine.backend.memory_bytes()
        assert out.peak_bytes < 2 * os.path.getsize(path) + planned + (64 << 20), out.peak_bytes


# -- 3. one error family: tensor-shape fields and file structure -------------------------------------------
_RETYPED = {"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight",
            "blk.0.attn_q.bias", "blk.0.ffn_down.weight", "blk.0.attn_q_norm.weight"}
"""One tensor of each role gets every other type (the rest of each role reads its types the same way)."""


def _shape_variants(t: Tensor) -> dict[str, Tensor]:
    """Hostile layouts of one tensor, each with data resized to match (the file stays readable)."""
    ne = t.ne
    bs = GGML_QUANT_SIZES[t.ggml_type][0]
    out = {
        "ne[0] + block": t.resized(ne=(ne[0] + bs, *ne[1:])),
        "last dim + 1": t.resized(ne=(*ne[:-1], ne[-1] + 1)) if len(ne) > 1 else t.resized(ne=(ne[0], 2)),
        "dims swapped": t.resized(ne=ne[::-1]) if len(ne) > 1 and ne[0] % bs == 0 == ne[-1] % bs else None,
        "extra dim": t.resized(ne=(*ne, 2)),
        "flattened": t.resized(ne=(int(np.prod(ne)),)),
        "huge dim": Tensor(t.name, (ne[0], 2**40), t.ggml_type, t.data),   # data runs past the file
    }
    for qt in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.IQ4_XS) if t.name in _RETYPED else ():   # where rows allow
        if qt != t.ggml_type and ne[0] % GGML_QUANT_SIZES[qt][0] == 0:
            out[f"as {qt.name}"] = t.resized(ggml_type=qt)
    return {k: v for k, v in out.items() if v is not None}


def _tensor_kinds(p: GGUFParts) -> list[str]:
    """Every tensor of layer 0 and every tensor outside the layers (the others repeat these)."""
    return [t.name for t in p.tensors if not t.name.startswith("blk.") or t.name.startswith("blk.0.")]


def _run_model(path) -> np.ndarray:
    """What LLM does with a file's tensors, without the tokenizer (the sweep leaves it alone): read, lay out
    the graph, load it on numpy, run a 4-token step and sample (NaN logits: NumericalError)."""
    from oxigpu.backends.base import Step
    from oxigpu.backends.numpy_backend import NumpyBackend
    from oxigpu.graph.plan import compile as compile_plan
    from oxigpu.models import HParams, build_graph
    from oxigpu.runtime.sampling import SamplerConfig, sample
    f = GGUFFile(path)
    hp = HParams.from_gguf(f)
    plan = compile_plan(build_graph(f, hp, 4, 32))
    backend = NumpyBackend(f, 32)
    logits = backend.run(plan, Step.single([1, 2, 3, 4], 0))["logits"]
    sample(logits, SamplerConfig(), [1, 2, 3, 4])
    return logits


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory) -> dict[str, GGUFParts]:
    """Each tiny architecture cut to one layer (the others repeat its tensors), taken apart."""
    from oxigpu.synth import synthesize
    out = tmp_path_factory.mktemp("one-layer")
    return {name: GGUFParts.read(synthesize(name, out / f"{name}.gguf", seed=7, layers=1).path)
            for name in ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3")}


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"])
def test_tensor_shape_and_type_sweep(one_layer, tmp_path, name):
    """Every kind of tensor with every hostile layout (shape, rank, type) and removed: the model loads and
    runs, or raises an OxigpuError naming the file (a GGUFError) or the step (NumericalError). The sweep
    runs what LLM runs minus the tokenizer; a sample of the cases goes through LLM and the CLI as well."""
    base = one_layer[name]
    path = tmp_path / "case.gguf"
    loaded, failed = [], 0
    cases = [(tname, vname, tensor) for tname in _tensor_kinds(base)
             for vname, tensor in {**_shape_variants(base.tensor(tname)), "missing": None}.items()]
    for i, (tname, vname, tensor) in enumerate(cases):
        label = f"{name} {tname} {vname}"
        base.copy().replace_tensor(tname, tensor).write(path)
        out = clean(lambda: _run_model(path), label)
        if out.error is None:
            loaded.append(label)
        else:
            failed += 1
            assert not isinstance(out.error, GGUFError) or str(path) in str(out.error), label
        if i % 16 == 0:   # the public entry points agree: LLM raises the same way (or works)
            whole = clean(lambda: LLM(path, backend="numpy", n_ctx=32).generate("Hi", max_tokens=2, seed=1), label)
            assert type(whole.error) is type(out.error), (label, whole.error, out.error)
    assert failed > 4 * len(_tensor_kinds(base))          # most layouts are refused
    assert any("as F16" in x for x in loaded)             # small tensors in another float type still load


TYPE_VARIANTS = [("token_embd.weight", Q.Q8_0), ("blk.0.attn_norm.weight", Q.F16), ("blk.0.attn_q.bias", Q.BF16),
                 ("blk.0.attn_q.weight", Q.IQ4_XS), ("blk.0.attn_v.weight", Q.F32), ("output_norm.weight", Q.Q8_0)]


@pytest.mark.gpu
@pytest.mark.parametrize("tensor, qtype", TYPE_VARIANTS)
def test_tensor_types_on_wgpu(one_layer, tmp_path, tensor, qtype):
    """A tensor stored in a type the file's writer would not pick loads and runs on wgpu as on numpy (the
    same greedy tokens), or raises an OxigpuError there."""
    from oxigpu.backends.wgpu.device import Device
    try:
        Device.get()
    except DeviceError as e:
        pytest.skip(str(e))
    base = one_layer["tiny-qwen2"]
    path = base.copy().replace_tensor(tensor, base.tensor(tensor).resized(ggml_type=qtype)).write(tmp_path / "t.gguf")
    ref = clean(lambda: LLM(path, backend="numpy", n_ctx=32).generate("Hi", max_tokens=4, temperature=0), tensor)
    out = clean(lambda: LLM(path, backend="wgpu", n_ctx=32).generate("Hi", max_tokens=4, temperature=0), tensor,
                seconds=120)
    if out.error is None and ref.error is None:
        assert out.value.token_ids == ref.value.token_ids


STRUCTURE = {
    "no architecture": lambda p: p.drop("general.architecture"),
    "unknown architecture": lambda p: p.set("general.architecture", "cuda-net"),
    "architecture as an array": lambda p: p.set("general.architecture", (V.UINT8, np.zeros(3, np.uint8)), V.ARRAY),
    "no tokenizer model": lambda p: p.drop("tokenizer.ggml.model"),
    "no tokens": lambda p: p.drop("tokenizer.ggml.tokens"),
    "tokens as numbers": lambda p: p.set("tokenizer.ggml.tokens", (V.INT32, np.zeros(4, np.int32))),
    "tokenizer model as a number": lambda p: p.set("tokenizer.ggml.model", 3, V.INT32),
    "bos id as a string": lambda p: p.set("tokenizer.ggml.bos_token_id", "1", V.STRING),
    "bos id out of range": lambda p: p.set("tokenizer.ggml.bos_token_id", 2**31 - 1, V.UINT32),
    "add_bos as an array": lambda p: p.set("tokenizer.ggml.add_bos_token", (V.UINT8, np.ones(2, np.uint8)), V.ARRAY),
    "scores too short": lambda p: p.set("tokenizer.ggml.scores", (V.FLOAT32, np.zeros(3, np.float32))),
    "token types as strings": lambda p: p.set("tokenizer.ggml.token_type", (V.STRING, ["x"] * 5)),
    "chat template as a number": lambda p: p.set("tokenizer.chat_template", 7, V.INT32),
    "tokenizer smaller than the model": lambda p: _with_tokens(p, list(p.get("tokenizer.ggml.tokens")[1][:-7])),
    "vocab_size disagrees": lambda p: p.set(f"{p.get('general.architecture')}.vocab_size", 17, V.UINT32),
    "no tensors": lambda p: GGUFParts(p.metadata, []),
    "tensors twice": lambda p: GGUFParts(p.metadata, p.tensors + p.tensors),
    "version 1": lambda p: GGUFParts(p.metadata, p.tensors, version=1),
    "alignment 0": lambda p: p.set("general.alignment", 0, V.UINT32),
}


@pytest.mark.parametrize("name", sorted(STRUCTURE))
@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen2"])
def test_file_structure_sweep(parts, tmp_path, name, arch):
    """File structure the parser accepts or refuses, through the API (load, chat, generate) and the CLI:
    an OxigpuError (one CLI line, exit 1) or a working model, never another exception."""
    path = STRUCTURE[name](parts[arch].copy()).write(tmp_path / "case.gguf")

    def use() -> LLM:
        llm = LLM(path, backend="numpy", n_ctx=32)
        llm.generate("Hi", max_tokens=2, seed=1)
        return llm
    out = clean(use, name)
    if out.error is None:   # chat too (a broken template fails here, with the model still usable)
        clean(lambda: out.value.chat([{"role": "user", "content": "Hi"}], max_tokens=2, seed=1), name)
    res = CliRunner().invoke(cli, ["run", "-m", str(path), "-p", "Hi", "-n", "2", "--backend", "numpy",
                                   "--n-ctx", "32"])
    if out.error is None:
        assert res.exit_code == 0, res.output
    else:
        assert res.exit_code == 1 and res.stderr.count("Error:") == 1 and "Traceback" not in res.output


# -- 6. files that change on disk under a loaded model -------------------------------------------------------
def _truncate(path) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _rewrite_in_place(path) -> None:
    data = open(path, "rb").read()
    time.sleep(0.02)                       # a new mtime even on coarse timestamp clocks
    with open(path, "r+b") as f:           # same size, same inode, other bytes
        f.write(bytes(len(data) - 1024) + data[-1024:])


def _replace_by_rename(path) -> None:
    tmp = str(path) + ".new"
    shutil.copyfile(path, tmp)
    with open(tmp, "r+b") as f:
        f.truncate(100)
    os.replace(tmp, path)                  # the loaded model keeps the old inode


CHANGES = {"truncated": _truncate, "rewritten in place": _rewrite_in_place, "replaced by rename": _replace_by_rename}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("backend", ["numpy", pytest.param("wgpu", marks=pytest.mark.gpu)])
def test_model_file_changing_under_a_loaded_model(tiny_models, tmp_path, backend, change):
    """numpy reads the (untied) embedding table at every step: through pread with a size/mtime check, so a
    truncated or rewritten file is a GGUFError, never SIGBUS; a file replaced by rename keeps working (the
    old inode stays open). wgpu reads the file only while loading: the weights are on the device after."""
    if backend == "wgpu":
        from oxigpu.backends.wgpu.device import Device
        try:
            Device.get()
        except DeviceError as e:
            pytest.skip(str(e))
    path = tmp_path / "model.gguf"
    shutil.copyfile(tiny_models["tiny-llama"], path)        # untied: numpy keeps token_embd quantized, lazily read
    llm = LLM(path, backend=backend, n_ctx=64)
    before = llm.generate("Once upon", max_tokens=6, temperature=0).token_ids
    CHANGES[change](path)
    out = clean(lambda: llm.generate("A different prompt", max_tokens=6, temperature=0), change)
    if backend == "numpy" and change != "replaced by rename":
        assert isinstance(out.error, GGUFError) and "changed on disk" in str(out.error), out.error
    else:
        assert out.error is None
        assert llm.generate("Once upon", max_tokens=6, temperature=0).token_ids == before


def test_tensor_views_check_the_file(tiny_models, tmp_path):
    path = tmp_path / "model.gguf"
    shutil.copyfile(tiny_models["tiny-qwen2"], path)
    f = GGUFFile(path)
    t = next(iter(f.tensors.values()))
    first = t.read()
    assert np.array_equal(first, np.asarray(t.data)) and np.array_equal(t.read_rows(np.array([0])), first[:1])
    _truncate(path)
    for access in (lambda: t.data, t.read, lambda: t.read_rows(np.array([0]))):
        with pytest.raises(GGUFError, match="changed on disk"):
            access()


# -- 10. cheap checks before expensive work ----------------------------------------------------------------
@pytest.fixture(scope="module")
def small_ctx(tiny_models) -> LLM:
    return LLM(tiny_models["tiny-qwen2"], backend="numpy", n_ctx=64)


@pytest.mark.parametrize("make", ["20 MiB prompt", "chat of 4 MiB", "message over the output limit"])
def test_prompt_length_is_bounded_before_tokenizing(small_ctx, make):
    """A text that cannot fit (n_ctx times the longest token) is refused from its length: a 20 MiB prompt
    with a 64-token context took 35 s and 3.4 GB to tokenize before its length was checked."""
    calls = {
        "20 MiB prompt": lambda: small_ctx.generate("word " * (4 << 20), max_tokens=1),
        "chat of 4 MiB": lambda: small_ctx.chat([{"role": "user", "content": "word " * (800 << 10)}], max_tokens=1),
        "message over the output limit": lambda: small_ctx.chat(
            [{"role": "user", "content": "x" * (limits.MAX_OUTPUT_CHARS + 1)}], max_tokens=1),
    }
    out = clean(calls[make], make, seconds=2, memory=256 << 20)
    assert isinstance(out.error, ContextLengthError), out.error
    long_but_fitting = "ab " * 20      # short texts still tokenize and run
    assert small_ctx.generate(long_but_fitting, max_tokens=1, seed=1).token_ids


def test_cli_prompt_length_is_bounded_before_tokenizing(tiny_models, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("word " * (2 << 20))
    t0 = time.perf_counter()
    res = CliRunner().invoke(cli, ["run", "-m", tiny_models["tiny-qwen2"], "-p", "-", "--n-ctx", "64",
                                   "--backend", "numpy"], input=prompt.read_text())
    assert res.exit_code == 1 and "at least" in res.stderr and time.perf_counter() - t0 < 10


@pytest.mark.parametrize("kwargs, fragment", [
    ({"temperature": 1e39}, "float32"),
    ({"temperature": 1e-45}, "float32"),
    ({"presence_penalty": -1e39}, "float32"),
    ({"frequency_penalty": 3.5e38}, "float32"),
    ({"repeat_penalty": 1e-40}, "float32"),
    ({"top_p": 1e-50}, None),            # representable as 0 < top_p: accepted, the same on both backends
    ({"min_p": 1e-50}, None),
    ({"top_k": 2**40, "repeat_last_n": 2**40}, None),
])
@pytest.mark.parametrize("backend", ["numpy", pytest.param("wgpu", marks=pytest.mark.gpu)])
def test_numeric_parameters_fit_their_consumer(tiny_models, backend, kwargs, fragment):
    """Every sampling value is checked against what the GPU sampler reads (float32, u32): 1e39 raised a raw
    OverflowError on the GPU path, 1e-45 became a division by zero."""
    if backend == "wgpu":
        from oxigpu.backends.wgpu.device import Device
        try:
            Device.get()
        except DeviceError as e:
            pytest.skip(str(e))
    llm = _llm_for(tiny_models["tiny-qwen2"], backend)
    out = clean(lambda: llm.generate("Hi", max_tokens=4, seed=3, **kwargs), str(kwargs))
    if fragment is None:
        assert out.error is None and len(out.value.token_ids) >= 1
        if backend == "wgpu":
            assert out.value.token_ids == _llm_for(tiny_models["tiny-qwen2"], "numpy").generate(
                "Hi", max_tokens=4, seed=3, **kwargs).token_ids
    else:
        assert isinstance(out.error, InvalidParameterError) and fragment in str(out.error), out.error


_LLMS: dict[tuple[str, str], LLM] = {}


def _llm_for(path: str, backend: str) -> LLM:
    """One LLM per file and backend, warmed by a first generation: the hostile cases' time bound is then
    the parameter's cost, not the first plan's compilation (seconds on lavapipe under a loaded CI)."""
    if (path, backend) not in _LLMS:
        llm = LLM(path, backend=backend, n_ctx=64)
        llm.generate("Hi", max_tokens=2, seed=3)
        _LLMS[(path, backend)] = llm
    return _LLMS[(path, backend)]
