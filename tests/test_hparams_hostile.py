"""Hostile hyperparameters: every key HParams reads, on every architecture, with values a broken or
malicious file could hold, ends in a GGUFError naming the key (at load), or loads and computes finite logits.

The sweep runs in memory (HParams + graph + one numpy step per case) so it covers every key x value x
architecture in seconds; a few cases go through real files, `LLM` and the CLI to show the error surfaces at
load time, as one line.
"""
from __future__ import annotations

import math
import resource
import time

import numpy as np
import pytest
from click.testing import CliRunner
from gguf_edit import rewrite

from oxigpu.backends.base import Step
from oxigpu.backends.numpy_backend import NumpyBackend
from oxigpu.errors import GGUFError, OxigpuError
from oxigpu.gguf import GGUFFile
from oxigpu.graph.plan import compile as compile_plan
from oxigpu.models import FAMILIES, HParams, build_graph
from oxigpu.synth import SHAPES, synthesize

TINY = {}
for _name, _shape in SHAPES.items():
    if _name.startswith("tiny-"):
        TINY.setdefault(_shape.arch, _name)

HOSTILE = [0, -1, 1, 3, 2**40, float("nan"), float("inf"), -float("inf"), 1e-30, 1.5, True, "text",
           np.array([1, 2], np.int64), np.array([], np.int64)]
"""Values for every key: zero, negative, tiny, odd, huge, non-finite, wrong types, per-layer arrays."""

CASE_SECONDS = 5.0


class _Spy(dict):
    """Metadata that records which keys were asked for."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked: set[str] = set()

    def __contains__(self, k):
        self.asked.add(k)
        return super().__contains__(k)

    def get(self, k, default=None):
        self.asked.add(k)
        return super().get(k, default)

    def __getitem__(self, k):
        self.asked.add(k)
        return super().__getitem__(k)


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    return {arch: synthesize(shape, d / f"{shape}.gguf", "Q8_0", seed=3, workers=1).path
            for arch, shape in TINY.items()}


def test_every_architecture_has_a_tiny_shape():
    assert set(TINY) == set(FAMILIES)


def keys_read(arch: str, meta: dict, names) -> list[str]:
    spy = _Spy(meta)
    HParams.from_metadata(arch, spy, names)
    return sorted(k for k in spy.asked if k.startswith(f"{arch}."))


def values_for(meta: dict, key: str) -> list:
    good = meta.get(key)
    extra = []
    if isinstance(good, (int, float)) and not isinstance(good, bool):
        extra = [good * 2, good + 1, -good]       # plausible but inconsistent with the tensors
    return HOSTILE + extra


def _one_case(model, arch: str, meta: dict, names, key: str, value, weights: dict) -> str:
    """'error' (a GGUFError naming the key) or 'ran' (finite logits); anything else fails the test."""
    try:
        hp = HParams.from_metadata(arch, {**meta, key: value}, names)
        plan = compile_plan(build_graph(model, hp, 1, 32))
    except GGUFError as e:
        assert key in str(e), f"{key}={value!r}: the error does not name the key: {e}"
        return "error"
    backend = NumpyBackend(model, 32)
    backend._weights = weights     # dequantized once per file: a fresh backend per case, same weights
    with np.errstate(all="ignore"):
        out = backend.run(plan, Step.single([5], 0 if hp.family.encoder else 3))
        logits = out.get("logits", out.get("hidden"))      # encoders give hidden states
    assert np.isfinite(logits).all(), f"{key}={value!r} loads but gives non-finite logits"
    return "ran"


@pytest.mark.parametrize("arch", sorted(TINY))
def test_hostile_hyperparameter_values(arch, tiny_files):
    model = GGUFFile(tiny_files[arch])
    meta, names = dict(model.metadata), list(model.tensors)
    keys = keys_read(arch, meta, names)
    assert f"{arch}.block_count" in keys and f"{arch}.embedding_length" in keys
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes: dict[str, int] = {"error": 0, "ran": 0}
    weights: dict = {}
    for key in keys:
        for value in values_for(meta, key):
            t0 = time.perf_counter()
            outcomes[_one_case(model, arch, meta, names, key, value, weights)] += 1
            took = time.perf_counter() - t0
            assert took < CASE_SECONDS, f"{key}={value!r} took {took:.1f} s"
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    assert grew < 1 << 30, f"peak memory grew by {grew / 2**20:.0f} MiB"
    # Most hostile values must be refused; the ones that run are harmless (unused keys, 0 = "not set" ...)
    assert outcomes["error"] > 5 * outcomes["ran"], outcomes
    print(f"{arch}: {len(keys)} keys, {outcomes}")


@pytest.mark.parametrize("key,value", [("block_count", 0), ("attention.head_count_kv", 3),
                                       ("attention.layer_norm_rms_epsilon", float("nan")),
                                       ("rope.freq_base", -1.0), ("embedding_length", "wide"),
                                       ("attention.key_length", 33), ("feed_forward_length", 2**40)])
def test_hostile_file_fails_at_load_in_llm_and_cli(tmp_path, tiny_files, key, value):
    from oxigpu import LLM
    from oxigpu.cli.main import cli
    src = tiny_files["llama"]
    path = rewrite(src, tmp_path / "bad.gguf", set={f"llama.{key}": value})
    with pytest.raises(GGUFError, match=f"llama.{key}"):
        LLM(str(path), backend="numpy")
    res = CliRunner().invoke(cli, ["run", "-m", str(path), "-p", "hi", "-n", "2", "--backend", "numpy"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and f"llama.{key}" in errors[0] and str(path) in errors[0], res.output
    info = CliRunner().invoke(cli, ["info", str(path)])
    assert info.exit_code == 0 and "Q8_0" in info.output   # info still describes the file


def test_errors_name_the_value():
    meta = {"llama.block_count": 2, "llama.embedding_length": 64, "llama.attention.head_count": 4,
            "llama.feed_forward_length": 128, "llama.context_length": 256, "llama.vocab_size": 100}
    cases = {"llama.attention.head_count": (0, "0"), "llama.rope.freq_base": (math.nan, "nan"),
             "llama.attention.layer_norm_rms_epsilon": (-1e-5, "-1e-05"), "llama.context_length": ("x", "'x'")}
    for key, (value, shown) in cases.items():
        with pytest.raises(GGUFError) as e:
            HParams.from_metadata("llama", {**meta, key: value})
        assert key in str(e.value) and shown in str(e.value), str(e.value)
    assert isinstance(e.value, OxigpuError)
