"""The Python API on tiny synthetic models: determinism, stops, finish reasons, streaming, prefix reuse,
threads, validation, chat, logits and perplexity.

They run on the numpy backend; OXIGPU_TEST_BACKEND=wgpu runs the same checks on the GPU backend (whose
decode loop stays on the device, so closing, stops and threads meet a different code path there).
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from oxigpu import LLM, SamplingParams
from oxigpu.errors import ContextLengthError, InvalidParameterError, ModelNotFoundError

BACKEND = os.environ.get("OXIGPU_TEST_BACKEND", "numpy")
TINY = ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3")    # the keys of conftest.py's tiny_models
GREEDY = {"temperature": 0.0, "max_tokens": 12}
SAMPLED = {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 16}


@pytest.fixture(scope="module")
def llm(tiny_models) -> LLM:
    return LLM(tiny_models["tiny-qwen2"], backend=BACKEND, n_ctx=128)


@pytest.mark.parametrize("arch", TINY)
def test_greedy_is_deterministic(tiny_models, arch):
    model = LLM(tiny_models[arch], backend=BACKEND, n_ctx=64)
    first = model.generate("Hello world", **GREEDY)
    again = model.generate("Hello world", **GREEDY)
    fresh = LLM(tiny_models[arch], backend=BACKEND, n_ctx=64).generate("Hello world", **GREEDY)
    assert first.token_ids == again.token_ids == fresh.token_ids
    assert first.text == again.text == fresh.text
    assert first.finish_reason == ("length" if len(first.token_ids) == 12 else "stop")


def test_seeded_sampling_is_deterministic(llm, tiny_models):
    a = llm.generate("Once upon", seed=11, **SAMPLED)
    b = llm.generate("Once upon", seed=11, **SAMPLED)
    c = llm.generate("Once upon", seed=12, **SAMPLED)
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.token_ids != c.token_ids
    # the LLM's seed is the default; a SamplingParams object works like keywords
    seeded = LLM(tiny_models["tiny-qwen2"], backend=BACKEND, n_ctx=128, seed=11)
    assert seeded.generate("Once upon", SamplingParams(**SAMPLED)).token_ids == a.token_ids


def test_stream_equals_generate(llm):
    pieces = list(llm.stream("Once upon", seed=3, **SAMPLED))
    result = llm.generate("Once upon", seed=3, **SAMPLED)
    assert "".join(pieces) == result.text
    assert all(pieces)


def _boundary_stop(llm, prompt: str) -> tuple[str, str]:
    """A stop string made of the end of one generated piece and the start of the next."""
    ref = llm.generate(prompt, seed=5, **SAMPLED)
    pieces = [llm.tokenizer.token_to_piece(t, special=False).decode("utf-8", "replace") for t in ref.token_ids]
    for i in range(2, len(pieces) - 1):
        left, right = pieces[i], pieces[i + 1]
        if left and right and "\ufffd" not in left + right:
            return ref.text, left[-1] + right[0]
    pytest.fail(f"no two adjacent text pieces in {pieces}")


def test_stop_string_spanning_tokens_is_cut_and_never_emitted(llm):
    text, stop = _boundary_stop(llm, "Once upon")
    pieces = list(gen := llm.stream("Once upon", seed=5, stop=[stop], **SAMPLED))
    result = gen.result
    assert result.finish_reason == "stop"
    assert result.text == "".join(pieces) == text[:text.index(stop)]
    assert stop not in "".join(pieces)
    # tokens up to the one that completed the match are reported; the text is cut before it
    assert len(result.token_ids) < SAMPLED["max_tokens"]


def test_partial_stop_at_the_end_is_released(llm):
    text = llm.generate("Once upon", seed=5, **SAMPLED).text
    held = llm.generate("Once upon", seed=5, stop=[text[-1] + "\x00never"], **SAMPLED)
    assert held.text == text and held.finish_reason == "length"


def test_max_tokens_and_finish_reasons(llm):
    r = llm.generate("Hi", max_tokens=5, **{k: v for k, v in SAMPLED.items() if k != "max_tokens"}, seed=1)
    assert len(r.token_ids) == 5 and r.finish_reason == "length"
    r = llm.generate("Hi", max_tokens=0)
    assert (r.text, r.token_ids, r.finish_reason) == ("", [], "length")
    eog = min(llm.tokenizer.eog_ids)
    r = llm.generate("Hi", logit_bias={eog: 1000.0}, **GREEDY)
    assert (r.text, r.token_ids, r.finish_reason) == ("", [], "stop")
    # a full context ends generation: prompt rows + generated rows fill n_ctx, the last one is sampled
    prompt = list(range(10, 120))
    r = llm.generate(prompt, max_tokens=100, temperature=0.0, logit_bias={e: -math.inf for e in llm.tokenizer.eog_ids})
    assert r.finish_reason == "length" and len(r.token_ids) == llm.n_ctx - len(prompt) + 1


def test_prefix_reuse_is_reported_and_changes_nothing(llm, tiny_models):
    """Full 32-token blocks of an earlier request's prompt are reused by a later prompt that starts alike."""
    base = "The quick brown fox jumps over the lazy dog. " * 3
    llm.generate(base, **GREEDY)
    again = llm.generate(base + "And then", **GREEDY)
    n_prompt = len(llm.tokenize(base + "And then"))
    assert again.timings.cached_tokens > 0 and again.timings.cached_tokens % 32 == 0
    assert again.timings.cached_tokens < n_prompt
    assert again.timings.prompt_tokens == n_prompt and again.timings.generated_tokens == len(again.token_ids)
    fresh = LLM(tiny_models["tiny-qwen2"], backend=BACKEND, n_ctx=128).generate(base + "And then", **GREEDY)
    assert fresh.timings.cached_tokens == 0
    assert again.token_ids == fresh.token_ids


def test_closing_a_stream_midway_leaves_the_llm_usable(llm):
    reference = llm.generate("Once upon", seed=9, **SAMPLED)
    stream = llm.stream("Once upon", seed=9, **SAMPLED)
    next(stream), next(stream)
    stream.close()
    assert list(stream) == [] and stream.result is None
    for _ in llm.stream("Something else", seed=2, **SAMPLED):
        break
    with llm.stream("Third one", seed=2, **SAMPLED) as third:
        next(third)
    assert list(third) == []
    again = llm.generate("Once upon", seed=9, **SAMPLED)
    assert (again.text, again.token_ids) == (reference.text, reference.token_ids)


def test_interleaved_streams_in_one_thread_stay_independent(llm):
    """Streams advanced in turn do not leak into each other: each draws the same text beside either of the
    other two, and its first token (drawn before any switch) is the one it draws alone. Later tokens are
    only compared between runs that evaluate alike: on each switch the resumed stream's context is
    re-evaluated in one prefill, not step by step as a stream alone runs, and with the f16 KV cache that
    moves the logits by ~2e-5 relative (f32 values ~1e-6 apart that round to neighbouring halves), which
    moved "Beta gamma"'s 8th draw against its solo run."""
    prompts = {"a": ("Alpha", 1), "b": ("Beta gamma", 2), "c": ("Delta", 3)}

    def interleaved(x: str, y: str) -> dict[str, tuple[str, list[int]]]:
        streams = {k: llm.stream(prompts[k][0], seed=prompts[k][1], **SAMPLED) for k in (x, y)}
        out: dict[str, list[str]] = {x: [], y: []}
        live = dict(streams)
        while live:
            for name, stream in list(live.items()):      # one piece from each in turn
                piece = next(stream, None)
                if piece is None:
                    del live[name]
                else:
                    out[name].append(piece)
        return {k: ("".join(out[k]), streams[k].result.token_ids) for k in (x, y)}

    ab, ac, bc = interleaved("a", "b"), interleaved("a", "c"), interleaved("b", "c")
    assert ab["a"] == ac["a"] and ab["b"] == bc["b"] and ac["c"] == bc["c"]
    for k, runs in (("a", ab), ("b", ab), ("c", ac)):
        alone = llm.generate(prompts[k][0], seed=prompts[k][1], **SAMPLED).token_ids
        assert runs[k][1][0] == alone[0]      # b's first draw comes after a's: a shared RNG counter shows


def test_threads_share_one_llm(llm):
    """Eight threads' requests run batched together and each gets its tokens alone. Sampled with top-k 40:
    batched rows multiply through gemm where a row alone takes gemv (float32 noise ~1e-5 relative), and on
    a random model's flat distribution (SAMPLED: temperature 1.5 over 256 candidates) that noise moves a
    draw's boundary onto another token about once in a hundred tokens; a realistic top-k keeps it rare."""
    sampled = {"temperature": 0.8, "top_k": 40, "max_tokens": 16}
    jobs = [(f"prompt number {i}", i) for i in range(8)]
    expected = [llm.generate(p, seed=s, **sampled).token_ids for p, s in jobs]
    got: list = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def worker(i: int) -> None:
        barrier.wait()
        prompt, seed = jobs[i]
        if i % 2:
            stream = llm.stream(prompt, seed=seed, **sampled)
            list(stream)
            got[i] = stream.result.token_ids
        else:
            got[i] = llm.generate(prompt, seed=seed, **sampled).token_ids

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == expected


@pytest.mark.parametrize("kwargs, fragment", [
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"min_p": 2.0}, "min_p"),
    ({"max_tokens": -3}, "max_tokens"),
    ({"top_k": -1}, "top_k"),
    ({"stop": ""}, "stop"),
    ({"logit_bias": {10**7: 1.0}}, "outside the vocabulary"),
])
def test_invalid_parameters_are_rejected(llm, kwargs, fragment):
    with pytest.raises(InvalidParameterError, match=fragment):
        llm.generate("Hi", **kwargs)


def test_invalid_construction(tiny_models, tmp_path):
    with pytest.raises(InvalidParameterError, match="unknown backend 'cuda'"):
        LLM(tiny_models["tiny-qwen2"], backend="cuda")
    with pytest.raises(InvalidParameterError, match="n_ctx"):
        LLM(tiny_models["tiny-qwen2"], backend=BACKEND, n_ctx=10**7)
    with pytest.raises(ModelNotFoundError, match="not found"):
        LLM(tmp_path / "missing.gguf")


def test_prompt_longer_than_context(llm):
    with pytest.raises(ContextLengthError, match=r"prompt has 200 tokens but the context holds 128"):
        llm.generate(list(range(10, 210)))
    with pytest.raises(ContextLengthError, match="128"):
        llm.generate(list(range(10, 138)))       # exactly n_ctx: no room left to generate


def test_empty_prompt_is_an_error_but_bos_alone_generates(tiny_models):
    model = LLM(tiny_models["tiny-llama"], backend=BACKEND, n_ctx=64)
    with pytest.raises(InvalidParameterError, match="empty"):
        model.generate("")
    with pytest.raises(InvalidParameterError, match="empty"):
        model.generate([])
    r = model.generate([model.tokenizer.bos_id], **GREEDY)
    assert r.token_ids


def test_chat_uses_the_template_and_validates_messages(llm):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    ids = llm.chat_prompt(messages)
    assert llm.detokenize(ids).startswith("<|im_start|>system\nBe brief.")
    r = llm.chat(messages, seed=4, **SAMPLED)
    assert r.finish_reason in ("stop", "length")
    assert "".join(llm.stream_chat(messages, seed=4, **SAMPLED)) == r.text
    with pytest.raises(InvalidParameterError, match="messages"):
        llm.chat([{"role": "user"}])
    with pytest.raises(InvalidParameterError, match="messages"):
        llm.chat("hi")


def test_chat_template_bos_is_not_doubled(tiny_models):
    model = LLM(tiny_models["tiny-gemma3"], backend=BACKEND, n_ctx=64)
    ids = model.chat_prompt([{"role": "user", "content": "Hi"}])
    assert ids[0] == model.tokenizer.bos_id and ids[1] != model.tokenizer.bos_id


def test_logits_and_perplexity(llm):
    text = "the cat sat on the mat and the dog sat on the log"
    ids = llm.tokenize(text)
    logits = llm.logits(text)
    assert logits.shape == (len(ids), llm.tokenizer.vocab_size)
    rows = logits[:-1].astype(np.float64)
    log_probs = rows - rows.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    want = math.exp(-log_probs[np.arange(len(ids) - 1), ids[1:]].mean())
    assert llm.perplexity(text) == pytest.approx(want, rel=1e-6)
    assert 1.0 < want < 10 * llm.tokenizer.vocab_size
    # longer than the context: scored window by window
    long_ppl = llm.perplexity(" ".join([text] * 30))
    assert math.isfinite(long_ppl) and long_ppl > 1.0
    with pytest.raises(InvalidParameterError):
        llm.perplexity("a")


def test_tokenize_detokenize_round_trip(llm):
    ids = llm.tokenize("Hello world")
    assert llm.detokenize(ids) == "Hello world"
    assert llm.tokenize("<|im_start|>", add_special=False) == [llm.tokenizer.hf.token_to_id("<|im_start|>")]


def test_import_stays_light():
    code = "import sys, oxigpu; assert 'numpy' not in sys.modules; oxigpu.SamplingParams; print(oxigpu.LLM)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "oxigpu.api.LLM" in out.stdout
