"""Many sequences at once on the wgpu backend (lavapipe in CI): the paged kernels under the scheduler.

Each sequence's output in a batch is its output alone: greedy tokens of the tiny synthetic models (random
weights, logits far apart) are identical, and teacher-forced logits of rows batched together equal the
same rows run alone. The kernels are built for that: a row's GEMV sums, decode-attention splits and
prefill tiles do not depend on the other rows (tests/test_kernel_matmul.py, test_kernel_attention.py).
Also: preemption with scattered blocks, and the GPU-resident loop of the last sequence left running on
blocks that are not 0, 1, 2, ... (test_batching.py runs the same scenarios on numpy).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from oxigpu import LLM
from oxigpu.backends.base import Step
from oxigpu.runtime.kvcache import KV_BLOCK, SeqBlocks, block_bytes

pytestmark = pytest.mark.gpu

PROMPTS = ["Once upon a time", "The quick brown fox jumps over the lazy dog and then",
           "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,", "Hello", "Why is the sky blue?"]


@pytest.fixture(scope="module")
def llm(tiny_models) -> LLM:
    return LLM(tiny_models["tiny-qwen2"], backend="wgpu", n_ctx=128, max_seqs=4)


@pytest.fixture
def float_llm(tiny_models, monkeypatch) -> LLM:
    """``llm`` with f32 kernels everywhere. On a GPU the GEMMs and large GEMVs round x to int8 or f16 (as
    llama.cpp's do), moving logits by ~1e-3 of their range: enough for a seeded draw at temperature 1 to
    land across a CDF boundary, so a draw-for-draw equality with numpy needs f32 (lavapipe has it anyway)."""
    from oxigpu.backends.wgpu.device import Device
    monkeypatch.setenv("OXIGPU_INT8_DOTS", "0")
    monkeypatch.setattr(Device.get(), "has_mma", False)
    return LLM(tiny_models["tiny-qwen2"], backend="wgpu", n_ctx=128, max_seqs=4)


def test_a_batch_equals_each_prompt_alone(llm):
    """Five prompts on four slots (a decode bucket of 4, then 2 and 1 as they finish); the longest runs
    last, alone, on the GPU-resident loop through the blocks the batch left it."""
    lengths = [10, 24, 6, 16, 30]
    alone = [llm.generate(p, temperature=0.0, max_tokens=n).token_ids for p, n in zip(PROMPTS, lengths)]
    llm.engine.forget()
    streams = [llm.stream(p, temperature=0.0, max_tokens=n) for p, n in zip(PROMPTS, lengths)]
    steps = llm.engine.scheduler.steps
    for s in streams:
        list(s)
    assert [s.result.token_ids for s in streams] == alone
    assert llm.engine.scheduler.steps - steps < sum(lengths)            # rows shared steps
    assert llm.engine.pool.n_used == 0 or llm.engine.scheduler.idle


def test_teacher_forced_rows_batched_equal_alone(llm):
    """The logits of three sequences run together (their prompts in one mixed step, then decode steps of
    a row each) against each run alone: equal to float32 rounding (the kernels' rows do not mix)."""
    eng = llm.engine
    seqs = [llm.tokenize(p) + [5, 6, 7, 8, 9] for p in (PROMPTS[0], PROMPTS[3], PROMPTS[4])]
    n_prompt = [len(s) - 5 for s in seqs]

    def run(group: list[int]) -> dict[int, list[np.ndarray]]:
        blocks = {i: SeqBlocks() for i in group}
        with eng.lock:
            for i in group:                  # the table skips the first block: not 0, 1, 2, ...
                assert eng.pool.grow(blocks[i], len(seqs[i]) + KV_BLOCK)
            table = {i: blocks[i].blocks[1:] for i in group}
            try:
                out = {i: [row] for i, row in zip(group, eng.forward(Step.batch(
                    [(seqs[i][:n_prompt[i]], 0, table[i]) for i in group]), decode=False))}
                for j in range(4):
                    rows = eng.forward(Step.batch([(seqs[i][n_prompt[i] + j:n_prompt[i] + j + 1], n_prompt[i] + j,
                                                    table[i]) for i in group]), decode=True)
                    for i, row in zip(group, rows):
                        out[i].append(row)
            finally:
                for i in group:
                    eng.pool.release(blocks[i])
        return out

    together = run([0, 1, 2])
    for i in range(3):
        alone = run([i])[i]
        for a, b in zip(alone, together[i]):
            assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_preemption_through_scattered_blocks(tiny_models):
    """Six sequences on a pool of 8 blocks: the youngest are preempted, recomputed later in other blocks;
    every output equals its output alone."""
    path = tiny_models["tiny-qwen2"]
    big = LLM(path, backend="wgpu", n_ctx=128)
    hp = big.engine.hparams
    per_block = block_bytes(hp)
    small = LLM(path, backend="wgpu", n_ctx=128, max_seqs=4, kv_memory=8 * per_block)
    assert small.engine.pool.n_blocks == 8
    prompts = [f"{i} " + "tell me a story about the sea and the sky " * 2 for i in range(6)]
    params = dict(temperature=0.0, max_tokens=30)
    alone = [big.generate(p, **params).token_ids for p in prompts]
    got = small.generate(prompts, **params)
    assert [r.token_ids for r in got] == alone
    assert small.engine.scheduler.preemptions > 0


def _host_greedy(llm, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Greedy continuations of ``prompts`` stepped from the host: the batch's rows in one forward per step
    (prompts in one mixed step, then decode steps), each next token the argmax of its logits row."""
    eng = llm.engine
    seqs = [SeqBlocks() for _ in prompts]
    out = [[] for _ in prompts]
    with eng.lock:
        try:
            for s, p in zip(seqs, prompts):
                assert eng.pool.grow(s, len(p) + n)
            logits = eng.forward(Step.batch([(p, 0, s.blocks) for p, s in zip(prompts, seqs)]), decode=False)
            for j in range(n):
                for o, row in zip(out, logits):
                    o.append(int(np.argmax(row)))
                if j + 1 < n:
                    logits = eng.forward(Step.batch([([o[-1]], len(p) + j, s.blocks)
                                                     for o, p, s in zip(out, prompts, seqs)]), decode=True)
        finally:
            for s in seqs:
                eng.pool.release(s)
            eng.forget()
    return out


def test_resident_batch_equals_host_steps_and_reads_once_per_batch(llm):
    """Three sequences decoding together run on the GPU-resident loop: their greedy tokens equal those of
    the same batch stepped from the host (a forward per step, argmax of the logits read back), and the
    device sees one submit and one read per batch of steps, not per step (the device layer counts them)."""
    n = 40
    prompts = [llm.tokenize(p) for p in (PROMPTS[0], PROMPTS[3], PROMPTS[4])]   # one mixed step
    want = _host_greedy(llm, prompts, n)
    eng = llm.engine
    gens = [eng.start(p, llm.defaults.with_overrides(temperature=0.0, max_tokens=n)) for p in prompts]
    for g in gens:
        g.request.eog = frozenset()         # random weights: an end-of-generation id must not cut one short
    while not all(g.request.generated for g in gens):
        eng.scheduler.step()                # the prompts, and the first tokens drawn from their logits
    before, steps = dict(eng.backend.dev.counts), len(gens[0].request.generated)
    while not all(g.request.done for g in gens):
        assert eng.scheduler.step()
    counts = {k: v - before.get(k, 0) for k, v in eng.backend.dev.counts.items()}
    assert [g.request.generated for g in gens] == want
    decoded = n - steps                     # steps on the resident loop: batches of 2, 4, then 8 (and a tail)
    batches = 3 + (decoded - 6) // 8
    assert counts["read"] <= batches < decoded // 4, counts
    assert counts["submit"] <= batches, counts
    assert counts["write"] <= 10 + batches, counts   # the loop's setup (tables, sampler state), a write per batch


def test_constrained_sequences_batched_on_the_resident_loop_equal_numpy(tiny_models, float_llm):
    """Two constrained sequences (a JSON schema, a regex) and a free one decode together on the GPU-resident
    loop, each step's masks computed while its forward runs: every output equals the sequence's output alone
    on the numpy backend (host-stepped), and the constrained outputs hold."""
    from structured_cases import SCHEMAS

    runs = [dict(json_schema=SCHEMAS[0][1], temperature=1.0, seed=1, max_tokens=40),
            dict(regex=r"(yes|no), [a-z]{2,12}\.", temperature=1.0, seed=2, max_tokens=30),
            dict(temperature=1.0, seed=3, max_tokens=30)]
    ref = LLM(tiny_models["tiny-qwen2"], backend="numpy", n_ctx=128)
    want = [ref.generate("Hi", **kw).token_ids for kw in runs]
    eng = float_llm.engine
    gens = [float_llm.stream("Hi", **kw) for kw in runs]
    resident = eng.scheduler.resident_steps
    for g in gens:
        list(g)
    assert [g.result.token_ids for g in gens] == want
    assert re.fullmatch(r"(yes|no), [a-z]{2,12}\.", gens[1].result.text)
    assert eng.scheduler.resident_steps - resident >= 5   # drawn with masks on the device, not host-stepped


def test_host_steps_draw_with_the_gpu_sampler(tiny_models, float_llm, monkeypatch):
    """Steps the host runs (prompts joining decoding sequences, the first draw after a prompt) draw with the
    GPU sampler in the same queue and read back only the ids: no [S, vocab] logits (``Engine.forward`` is
    not called while a sequence draws), and every output equals the sequence alone on the numpy backend
    (penalties, a logit bias, logprobs, a constraint, a join mid-generation)."""
    runs = [dict(temperature=0.8, seed=5, max_tokens=12, repeat_penalty=1.3, logit_bias={7: 2.0}),
            dict(temperature=1.0, seed=6, max_tokens=10, logprobs=True, top_logprobs=3),
            dict(regex=r"(yes|no), [a-z]{2,12}\.", temperature=1.0, seed=2, max_tokens=30)]
    ref = LLM(tiny_models["tiny-qwen2"], backend="numpy", n_ctx=128)
    want = [ref.generate(p, **kw) for p, kw in zip(PROMPTS, runs)]
    eng = float_llm.engine
    logits_steps = []
    forward = eng.forward
    monkeypatch.setattr(eng, "forward", lambda step, decode: logits_steps.append(step) or forward(step, decode))
    first = float_llm.stream(PROMPTS[0], **runs[0])
    next(iter(first))                                   # decoding when the others join
    gens = [first] + [float_llm.stream(p, **kw) for p, kw in zip(PROMPTS[1:], runs[1:])]
    for g in gens:
        list(g)
    assert [g.result.token_ids for g in gens] == [w.token_ids for w in want]
    assert [x.logprob for x in gens[1].result.logprobs] == pytest.approx([x.logprob for x in want[1].logprobs],
                                                                         abs=1e-3)
    assert not logits_steps


def test_forced_tokens_stay_on_the_resident_loop(tiny_models, llm, monkeypatch):
    """The tokens a JSON schema forces (keys, punctuation) are drawn on the GPU-resident loop under
    one-token masks, the whole run queued before its ids are read back: after the prompt (and the forced
    tokens right after the first draw) no host step runs, the device is read once per free draw, not per
    token, and the output equals the numpy backend's host-stepped one."""
    from structured_cases import SCHEMAS

    kw = dict(json_schema=SCHEMAS[0][1], temperature=1.0, seed=1, max_tokens=40)
    want = LLM(tiny_models["tiny-qwen2"], backend="numpy", n_ctx=128).generate("Hi", **kw).token_ids
    eng = llm.engine
    gen = llm.stream("Hi", **kw)
    sampler, forced = gen.request.sampler, []
    take = sampler.forced_tokens
    monkeypatch.setattr(sampler, "forced_tokens", lambda: forced.extend(f := take()) or f)
    host = []
    run = eng.scheduler._run
    monkeypatch.setattr(eng.scheduler, "_run", lambda batch: host.append(batch) or run(batch))
    before = dict(eng.backend.dev.counts)
    list(gen)
    reads = eng.backend.dev.counts["read"] - before.get("read", 0)
    assert gen.result.token_ids == want
    assert len(host) <= 2 and len(forced) >= 5
    assert reads <= len(want) - len(forced) + 2, (reads, len(want), len(forced))
