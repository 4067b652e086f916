"""Many sequences at once (runtime/scheduler.py, runtime/kvcache.py) on the numpy backend.

Each sequence's output in a batch is its output alone: the tiny synthetic models (random weights, logits far
apart) give identical greedy tokens; the real models are compared with teacher-forced logits within a
stated tolerance, and greedy tokens may part only after a position where the top two logits lie within it
(such positions are counted and printed). Also: prefix sharing, n > 1, cancellation mid-batch, preemption
when the pool is too small for the workload, and 16 threads streaming from one LLM.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from oxigpu import LLM
from oxigpu.backends.base import Step
from oxigpu.runtime.kvcache import KV_BLOCK, SeqBlocks

GREEDY = {"temperature": 0.0, "max_tokens": 24}
PROMPTS = ["Once upon a time", "The quick brown fox jumps over the lazy dog and then",
           "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,", "Hello", "A", "Why is the sky blue?"]
REL = 2e-4
"""Teacher-forced logits, batched vs alone, within REL x max |logit|: float32 with another BLAS blocking per
batch shape (~1e-6) plus f16 cache rows that round to neighbouring halves (2^-11 relative), as
tests/test_numpy_backend.py measures for chunked prefill."""


@pytest.fixture(scope="module")
def llm(tiny_models) -> LLM:
    return LLM(tiny_models["tiny-qwen2"], backend="numpy", n_ctx=128, max_seqs=8)


def solo(llm: LLM, prompt, **kw):
    return llm.generate(prompt, **kw)


def test_a_batch_of_prompts_equals_each_prompt_alone(llm):
    alone = [solo(llm, p, **GREEDY) for p in PROMPTS]
    steps = llm.engine.scheduler.steps
    together = llm.generate(PROMPTS, **GREEDY)
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert [r.text for r in together] == [r.text for r in alone]
    assert llm.engine.scheduler.steps - steps < sum(len(r.token_ids) for r in alone)   # rows shared steps
    seeded = dict(temperature=0.9, top_k=40, max_tokens=16, seed=5)
    assert [r.token_ids for r in llm.generate(PROMPTS[:3], **seeded)] == \
        [solo(llm, p, **seeded).token_ids for p in PROMPTS[:3]]
    for r in together:
        t = r.timings
        assert t.queue_s >= 0 and t.prompt_s > 0 and t.generated_tokens == len(r.token_ids)


def test_n_completions_share_the_prompt_blocks(llm):
    prompt = "The history of the world, in brief: " * 4                   # more than two full blocks
    n_prompt = len(llm.tokenize(prompt))
    llm.engine.forget()
    outs = llm.generate(prompt, n=3, temperature=0.8, seed=11, max_tokens=12)
    assert len(outs) == 3
    assert [o.token_ids for o in outs] == [solo(llm, prompt, temperature=0.8, seed=11 + i, max_tokens=12).token_ids
                                          for i in range(3)]
    assert outs[0].timings.cached_tokens == 0
    assert all(o.timings.cached_tokens == (n_prompt - 1) // KV_BLOCK * KV_BLOCK for o in outs[1:])
    two = llm.generate([prompt, "Hi"], n=2, temperature=0.8, seed=3, max_tokens=4)
    assert [len(g) for g in two] == [2, 2]


def test_cancelling_mid_batch_frees_blocks_and_leaves_the_others_alone(llm):
    prompts = [PROMPTS[0] * 4, PROMPTS[1] * 2, PROMPTS[5] * 3]
    alone = [solo(llm, p, **GREEDY) for p in prompts]
    llm.engine.forget()
    pool = llm.engine.pool
    streams = [llm.stream(p, **GREEDY) for p in prompts]
    for _ in range(3):
        for s in streams:
            next(s)
    used = pool.n_used
    streams[1].close()
    assert pool.n_used < used                                   # freed at once: no step was running
    assert list(streams[1]) == [] and streams[1].result is None
    for i in (0, 2):
        list(streams[i])
        assert streams[i].result.token_ids == alone[i].token_ids
    assert llm.engine.scheduler.idle and pool.n_used == 0


def test_a_workload_larger_than_the_pool_completes_through_preemption(tiny_models):
    """Eight sequences of up to 80 tokens on a pool of 8 blocks (two contexts): the youngest sequences are
    preempted and recomputed, every output equals its output alone."""
    path = tiny_models["tiny-qwen2"]
    hp_llm = LLM(path, backend="numpy", n_ctx=128)
    hp = hp_llm.engine.hparams
    per_block = hp.n_layer * KV_BLOCK * 2 * hp.n_head_kv * (hp.head_dim + hp.head_dim_v)
    small = LLM(path, backend="numpy", n_ctx=128, max_seqs=4, kv_memory=8 * per_block)
    assert small.engine.pool.n_blocks == 8
    prompts = [f"{i} " + "tell me a story about the sea and the sky " * 2 for i in range(8)]
    params = dict(temperature=0.0, max_tokens=40)
    alone = [hp_llm.generate(p, **params).token_ids for p in prompts]
    got = small.generate(prompts, **params)
    assert [r.token_ids for r in got] == alone
    assert small.engine.scheduler.preemptions > 0 and sum(r.timings.preemptions for r in got) > 0
    assert small.engine.pool.n_used == 0


def test_sixteen_threads_stream_from_one_llm(llm):
    prompts = [f"thread {i}: " + PROMPTS[i % len(PROMPTS)] for i in range(16)]
    params = dict(temperature=0.7, seed=21, max_tokens=12)
    alone = [solo(llm, p, **params) for p in prompts]
    got: list = [None] * 16
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)
    steps = llm.engine.scheduler.steps

    def worker(i: int) -> None:
        try:
            barrier.wait()
            s = llm.stream(prompts[i], **params)
            text = "".join(s)
            got[i] = (text, s.result.token_ids)
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert got == [(r.text, r.token_ids) for r in alone]
    assert llm.engine.scheduler.steps - steps < sum(len(r.token_ids) for r in alone)   # batched together


# -- real models: batched == alone ----------------------------------------------------------------------------
REAL_PROMPTS = ["The capital of France is", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
                "Once upon a time, in a small village by the sea,"]
N_GEN = 64


def teacher_forced_batch(llm: LLM, seqs: list[list[int]], n_prompt: list[int]) -> list[np.ndarray]:
    """Logits of every position past each prompt, the sequences run together: their prompts in one mixed step,
    then one decode step per position with a row of each (as the scheduler batches them)."""
    eng = llm.engine
    blocks = [SeqBlocks() for _ in seqs]
    with eng.lock:
        for b, s in zip(blocks, seqs):
            assert eng.pool.grow(b, len(s))
        try:
            step = Step.batch([(s[:p], 0, b.blocks) for s, p, b in zip(seqs, n_prompt, blocks)])
            out = [[row] for row in eng.forward(step, decode=False)]
            for j in range(max(len(s) - p for s, p in zip(seqs, n_prompt)) - 1):
                live = [i for i, (s, p) in enumerate(zip(seqs, n_prompt)) if p + j < len(s) - 1]
                step = Step.batch([(seqs[i][n_prompt[i] + j:n_prompt[i] + j + 1], n_prompt[i] + j, blocks[i].blocks)
                                   for i in live])
                for i, row in zip(live, eng.forward(step, decode=True)):
                    out[i].append(row)
        finally:
            for b in blocks:
                eng.pool.release(b)
    return [np.stack(o) for o in out]


def near_tie(logits: np.ndarray, tol: float) -> bool:
    top2 = np.sort(logits)[-2:]
    return float(top2[1] - top2[0]) <= tol


@pytest.mark.parametrize("model", ["gemma3_path", "qwen_path"])
def test_real_models_batched_equal_alone(model, request):
    llm = LLM(request.getfixturevalue(model), backend="numpy", n_ctx=256, max_seqs=4)
    prompts = [llm.tokenize(p) for p in REAL_PROMPTS]
    params = dict(temperature=0.0, max_tokens=N_GEN, logit_bias={e: -np.inf for e in llm.tokenizer.eog_ids})
    alone = [llm.generate(p, **params).token_ids for p in prompts]
    seqs = [p + a for p, a in zip(prompts, alone)]
    # teacher forcing: the logits of every generated position, batched against alone
    batched = teacher_forced_batch(llm, seqs, [len(p) for p in prompts])
    scale = 0.0
    for s, p, b in zip(seqs, prompts, batched):
        ref = np.concatenate(list(llm.engine.eval_all(s)))[len(p) - 1:len(s) - 1]
        scale = max(scale, float(np.abs(ref).max()))
        err = float(np.abs(b - ref).max())
        assert err <= REL * np.abs(ref).max(), \
            f"batched logits differ by {err:.3g} (max |logit| {np.abs(ref).max():.3g})"
    # greedy tokens through the scheduler: identical, except after a near-tie
    together = llm.generate(prompts, **params)
    ties = 0
    for a, r, b in zip(alone, together, batched):
        diverged = next((i for i, (x, y) in enumerate(zip(a, r.token_ids)) if x != y), None)
        if diverged is not None:
            assert near_tie(b[diverged], 2 * REL * scale), f"greedy tokens part at {diverged} without a near-tie"
            ties += 1
        assert len(r.token_ids) == N_GEN
    print(f"{model}: {ties} of {len(prompts)} sequences parted after a near-tie ({N_GEN} tokens each)")
