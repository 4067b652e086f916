"""Speculative decoding (runtime/speculative.py): greedy output identical to plain decoding (draft model,
prompt lookup), the rejection sampler's output distribution (chi-square over seeded draws), the cache after
rejected drafts (the next logits equal plain decoding's), refusals, and the CLI options.

Tiny synthetic models (numpy backend): the same file as its own draft accepts everything, another seed's
weights accept almost nothing, the same weights quantized to Q8_0 accept some (the three paths of a round);
the real Qwen 0.5B runs 24 greedy tokens with itself as the draft and with lookup.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from oxigpu import LLM
from oxigpu.backends.base import Step
from oxigpu.errors import InvalidParameterError
from oxigpu.graph.ir import KV_BLOCK
from oxigpu.runtime import sampling
from oxigpu.runtime.kvcache import blocks_for
from oxigpu.runtime.speculative import DRAFT_STREAM, SpeculativeConfig, lookup, pick, verify

GREEDY = {"temperature": 0.0, "max_tokens": 30}
PROMPTS = ["Once upon a time", "Hello", "1, 2, 3, 4, 5, 6"]


def chi2_critical(df: int, z: float = 3.29) -> float:
    """The chi-square quantile of ``df`` degrees of freedom at the normal quantile ``z`` (Wilson-Hilferty;
    z = 3.29: a correct sampler fails once in 2000 runs)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic over the cells of expected count >= 5 (the rest pooled) and its dof."""
    n = counts.sum()
    exp = probs * n
    big = exp >= 5
    obs_c = np.append(counts[big], counts[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    return float(((obs_c[keep] - exp_c[keep]) ** 2 / exp_c[keep]).sum()), int(keep.sum()) - 1


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """tiny-qwen2 (the target), another seed of it, and its own weights quantized to Q8_0."""
    from oxigpu.synth import synthesize
    out = tmp_path_factory.mktemp("spec")
    target = synthesize("tiny-qwen2", out / "t.gguf", seed=7, workers=1).path
    other = synthesize("tiny-qwen2", out / "o.gguf", seed=8, workers=1).path
    q8 = synthesize("tiny-qwen2", out / "q8.gguf", seed=7, ftype="Q8_0", workers=1).path
    return {"target": target, "other": other, "q8": q8}


@pytest.fixture(scope="module")
def plain(models):
    return LLM(models["target"], backend="numpy", n_ctx=128)


# -- greedy identity ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["self", "other", "q8", "lookup"])
def test_greedy_output_is_the_plain_decoders(models, plain, kind):
    kw = {"speculative": "lookup"} if kind == "lookup" else \
        {"draft_model": models["target" if kind == "self" else kind], "speculative": {"num_tokens": 4}}
    llm = LLM(models["target"], backend="numpy", n_ctx=128, **kw)
    for prompt in PROMPTS:
        assert llm.generate(prompt, **GREEDY).token_ids == plain.generate(prompt, **GREEDY).token_ids, prompt
    st = llm.speculative_stats
    assert st["rounds"] > 0 and st["drafted"] > 0
    if kind == "self":
        assert st["acceptance_rate"] == 1.0      # the same model drafts exactly what it then verifies
    if kind == "other":
        assert st["acceptance_rate"] < 0.5
    # every round emits its accepted drafts plus one token
    assert st["emitted"] == st["accepted"] + st["rounds"]


def test_several_sequences_fall_back_to_batching(models, plain):
    llm = LLM(models["target"], backend="numpy", n_ctx=128, draft_model=models["q8"])
    together = llm.generate(PROMPTS, **GREEDY)
    assert [r.token_ids for r in together] == [plain.generate(p, **GREEDY).token_ids for p in PROMPTS]


def test_stop_strings_eog_and_max_tokens_end_a_round_where_plain_ends(models, plain):
    llm = LLM(models["target"], backend="numpy", n_ctx=128, draft_model=models["target"],
              speculative={"num_tokens": 6})
    for n in (1, 2, 5, 7):
        assert llm.generate("Hello", temperature=0, max_tokens=n).token_ids == \
            plain.generate("Hello", temperature=0, max_tokens=n).token_ids
    ref = plain.generate("Once upon a time", **GREEDY)
    stop = ref.text[len(ref.text) // 2:len(ref.text) // 2 + 3]
    if stop.strip():
        a = llm.generate("Once upon a time", temperature=0, max_tokens=30, stop=[stop])
        b = plain.generate("Once upon a time", temperature=0, max_tokens=30, stop=[stop])
        assert (a.text, a.finish_reason) == (b.text, b.finish_reason)


def test_context_end(models, plain):
    llm = LLM(models["target"], backend="numpy", n_ctx=40, draft_model=models["target"],
              speculative={"num_tokens": 8})
    small = LLM(models["target"], backend="numpy", n_ctx=40)
    a = llm.generate("Hello", temperature=0, max_tokens=100)
    b = small.generate("Hello", temperature=0, max_tokens=100)
    assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason == "length"


# -- the cache after rejections ---------------------------------------------------------------------------
def test_rolled_back_cache_gives_the_plain_decoders_next_logits(models, plain):
    """Drafts from other weights are rejected (their rows stay past the sequence's end): mid-generation, the
    target's cache must give the logits plain decoding gets for the same tokens, and hold only the blocks
    the sequence's length needs."""
    llm = LLM(models["target"], backend="numpy", n_ctx=128, draft_model=models["other"],
              speculative={"num_tokens": 5})
    eng = llm.engine
    gen = llm.stream("Once upon a time", temperature=0, max_tokens=40)
    req = gen.request
    checked = 0
    for _ in range(12):
        eng.scheduler.step()
        if req.done:
            break
        assert req.remaining == 1 and len(req.blocks.blocks) == blocks_for(len(req.tokens))
        got = eng.backend.run(eng.decode_plan, Step.single([req.tokens[-1]], req.computed,
                                                           req.blocks.blocks))["logits"][0]
        want, _ = plain.engine.eval(req.tokens)
        np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())
        checked += 1
    gen.close()
    assert checked >= 8 and llm.speculative_stats["drafted"] > llm.speculative_stats["accepted"]
    assert eng.pool.n_used == 0                 # the closed request's blocks went back


def test_draft_cache_follows_the_accepted_tokens(models):
    """The draft model's cache keeps only rows of tokens the sequence holds: after a generation its tokens
    are a prefix of the context plus at most k - 1 drafts, and its next-token logits there equal a fresh
    evaluation's."""
    llm = LLM(models["target"], backend="numpy", n_ctx=128, draft_model=models["q8"], speculative={"num_tokens": 4})
    fresh = LLM(models["q8"], backend="numpy", n_ctx=128)
    gen = llm.stream("1, 2, 3, 4, 5, 6", temperature=0, max_tokens=20)
    for _ in range(6):
        llm.engine.scheduler.step()
    spec = llm.engine.speculator
    ctx = list(gen.request.tokens)
    got = spec._fill(spec.draft, ctx, need_logits=True)
    want, _ = fresh.engine.eval(ctx)
    np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())
    gen.close()


def test_toggling_speculation_gives_the_draft_cache_back(models, plain):
    """The speculative bench's pattern: one draft model (a pool of one small context), speculation turned on
    and off around every request. A replaced speculator gives its draft cache's blocks back (they used to
    stay referenced, so the third request found the pool full: "the draft model's pool holds a full context,
    yet it could not give one"); the blocks in use never exceed one context and none stay after the last."""
    llm = LLM(models["target"], backend="numpy", n_ctx=64)
    draft = LLM(models["q8"], backend="numpy", n_ctx=64, max_seqs=1)
    pool = draft.engine.pool
    assert pool.n_blocks == blocks_for(64)
    for i in range(8):
        prompt = PROMPTS[i % len(PROMPTS)]
        llm.speculate()
        ref = llm.generate(prompt, temperature=0, max_tokens=20).token_ids
        llm.speculate(draft, {"num_tokens": 4})
        assert llm.generate(prompt, temperature=0, max_tokens=20).token_ids == ref, prompt
        assert llm.speculative_stats["rounds"] > 0
        assert pool.n_used <= blocks_for(64) and llm.engine.pool.n_used == 0
    llm.speculate()
    assert pool.n_used == 0 and pool.n_free == pool.n_blocks


# -- distributions ----------------------------------------------------------------------------------------
SAMPLED = sampling.SamplerConfig(temperature=0.9, top_k=12, top_p=0.9, min_p=0.02, seed=0)


def test_distribution_is_what_draw_samples():
    """sampling.distribution (p and q of the rejection test) is the distribution sampling.draw draws from."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, 40).astype(np.float32)
    ids, p = sampling.distribution(logits, SAMPLED, [3, 3, 5], 0)
    assert abs(p.sum() - 1) < 1e-9 and len(ids) <= 12
    n = 20000
    cfg = sampling.SamplerConfig(**{**SAMPLED.__dict__, "repeat_penalty": 1.3, "penalty_last_n": 8})
    ids, p = sampling.distribution(logits, cfg, [3, 3, 5], 0)
    drawn = np.array([sampling.draw(logits, cfg, [3, 3, 5], c).token for c in range(n)])
    counts = np.array([(drawn == t).sum() for t in ids])
    assert counts.sum() == n                     # nothing outside the distribution's support
    stat, df = chi2(counts, p)
    assert stat < chi2_critical(df), (stat, df)
    greedy = sampling.SamplerConfig()
    assert sampling.distribution(logits, greedy)[0].tolist() == [sampling.draw(logits, greedy).token]


def _toy_model(vocab: int, seed: int):
    """A next-token table over contexts of up to two tokens: logits by (a, b)."""
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 1.5, (vocab + 1, vocab + 1, vocab)).astype(np.float32)

    def logits(ctx: list[int]) -> np.ndarray:
        a = ctx[-2] if len(ctx) >= 2 else vocab
        b = ctx[-1] if ctx else vocab
        return table[a, b]
    return logits


@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_rejection_sampling_keeps_the_targets_distribution(drafter):
    """The first three tokens emitted by speculative rounds (k = 3) from a toy target and a different toy
    draft (or fixed lookup-style point-mass drafts) follow the target's own joint distribution
    p(t1) p(t2 | t1) p(t3 | t1 t2), with the sampling settings applied to both: chi-square over 4,000 seeds,
    critical value at z = 3.29."""
    vocab, k, n = 5, 3, 4000
    cfg = sampling.SamplerConfig(temperature=0.8, top_p=0.95, repeat_penalty=1.2, penalty_last_n=4)
    target, draft = _toy_model(vocab, 1), _toy_model(vocab, 2)
    prompt = [1, 2]

    def dist(model, ctx):
        return sampling.distribution(model(ctx), cfg, ctx)

    counts = np.zeros((vocab,) * 3)
    for seed in range(n):
        ctx = list(prompt)
        counter = 0
        while len(ctx) < len(prompt) + 3:
            drafts, qs, dctx = [], [], list(ctx)
            for i in range(k):
                if drafter == "model":
                    q = dist(draft, dctx)
                    x = pick(q, sampling.uniform(seed ^ DRAFT_STREAM, counter + i))
                    qs.append(q)
                else:
                    x = (dctx[-1] + 1) % vocab            # a fixed guess: a point mass
                drafts.append(x)
                dctx.append(x)
            ps, pctx = [], list(ctx)
            for i in range(k + 1):
                ps.append(dist(target, pctx))
                if i < k:
                    pctx.append(drafts[i])
            out = verify(drafts, qs if drafter == "model" else None, ps, seed, counter)
            ctx += out
            counter += len(out)
        counts[tuple(ctx[len(prompt):len(prompt) + 3])] += 1
    expect = np.zeros((vocab,) * 3)
    for a in range(vocab):
        ia, pa = dist(target, prompt)
        pa_ = dict(zip(ia.tolist(), pa))
        for b in range(vocab):
            ib, pb = dist(target, prompt + [a])
            pb_ = dict(zip(ib.tolist(), pb))
            ic, pc = dist(target, prompt + [a, b])
            for c, pcv in zip(ic.tolist(), pc):
                expect[a, b, c] = pa_.get(a, 0) * pb_.get(b, 0) * pcv
    assert counts[expect == 0].sum() == 0        # nothing the target's settings rule out
    stat, df = chi2(counts.ravel(), expect.ravel())
    assert stat < chi2_critical(df), (stat, df)


def test_sampled_generation_runs_and_is_seeded(models):
    llm = LLM(models["target"], backend="numpy", n_ctx=128, draft_model=models["q8"])
    a = llm.generate("Hello", temperature=0.8, seed=5, max_tokens=20)
    b = llm.generate("Hello", temperature=0.8, seed=5, max_tokens=20)
    assert a.token_ids == b.token_ids and len(a.token_ids) > 0


# -- lookup -----------------------------------------------------------------------------------------------
def test_gate_holds_rounds_back_where_they_cost_more_than_they_give():
    """The gate's arithmetic: a round is worth it while its tokens would have taken longer at the GPU-resident
    loop's rate; a loss, or a rate not yet known, holds the next HOLD_TOKENS plain tokens back from drafting
    (twice as many after each further loss in a row, until a round pays); the first round's time is dropped."""
    from oxigpu.runtime.speculative import HOLD_MAX, HOLD_TOKENS, _Gate
    g = _Gate()
    g.round(5.0, 2, 0.001)          # first round (a pipeline compiled on first use): dropped
    assert g.worth(0.001) and g.hold == 0 and g.round_s == 0.0
    g.round(0.004, 5, 0.0)          # the loop's rate unknown: a plain burst measures it
    assert g.hold == HOLD_TOKENS
    g.plain(HOLD_TOKENS)
    assert g.hold == 0
    g.round(0.008, 2, 0.001)        # 8 ms for 2 tokens at 1 ms a plain token: a loss on average
    assert g.hold == HOLD_TOKENS and not g.worth(0.001)
    g.plain(6)
    assert g.hold == HOLD_TOKENS - 6
    g.plain(HOLD_TOKENS)
    assert g.hold == 0
    g.round(0.008, 2, 0.001)        # a second loss in a row: twice the hold
    assert g.hold == 2 * HOLD_TOKENS
    g.plain(2 * HOLD_TOKENS)
    for _ in range(20):
        g.round(0.003, 5, 0.001)    # 5 tokens for 3 ms: a gain
    assert g.worth(0.001) and 4.9 < g.tokens <= 5.0
    g.plain(g.hold)                 # the hold the early losses left runs out
    g.round(0.003, 5, 0.001)
    assert g.hold == 0 and g.losses == 0    # a winning round holds nothing back, and ends the run of losses
    holds = []
    for _ in range(12):             # a long run of losses: the holds double up to HOLD_MAX
        g.round(0.05, 1, 0.001)
        holds.append(g.hold)
        g.plain(g.hold)
    assert holds[-1] == HOLD_MAX and all(a <= b for a, b in zip(holds, holds[1:])) and holds[0] >= HOLD_TOKENS
    h = _Gate()                     # no resident loop (numpy): host steps are the yardstick
    h.plain(1, 0.002)
    h.plain(1, 0.004)
    assert h.host_s == pytest.approx(0.0025) and h.hold == 0


def test_host_steps_run_the_gates_hold_down(models):
    """Without the GPU-resident loop (numpy), plain host steps count down a hold the gate set: rounds resume."""
    llm = LLM(models["target"], backend="numpy", n_ctx=128, speculative="lookup")
    spec = llm.engine.speculator
    spec._gate.hold = 4
    out = llm.generate("Once upon a time", temperature=0, max_tokens=24)
    st = llm.speculative_stats
    assert len(out.token_ids) == 24 and st["plain_steps"] >= 4 and st["rounds"] > 0
    assert spec._gate.host_s > 0.0


def test_scheduler_measures_the_loops_steady_rate(models, dev):
    """Scheduler.token_s: seconds per step of one sequence between the GPU-resident loop's batches (the
    speculative gate's yardstick), positive once a stream gave two batches, and a step's share of the run."""
    import time
    llm = LLM(models["target"], backend="wgpu", n_ctx=64)
    sched = llm.engine.scheduler
    assert sched.token_s == 0.0
    t0 = time.perf_counter()
    out = llm.generate("Once upon a time", temperature=0, max_tokens=20)
    elapsed = time.perf_counter() - t0
    assert len(out.token_ids) == 20 and sched.resident_steps >= 6     # batches of 2, 4, 8, ...
    assert 0.0 < sched.token_s < elapsed / 4
def test_lookup_drafts_what_followed_the_last_ngram():
    assert lookup([1, 2, 3, 9, 9, 1, 2, 3], 3, 3) == [9, 9, 1]
    assert lookup([5, 1, 2, 7, 1, 2, 8, 6, 1, 2], 2, 2) == [8, 6]           # the latest occurrence
    assert lookup([4, 4, 4, 4, 4], 3, 2) == [4, 4, 4]                       # a run: k tokens still follow
    assert lookup([1, 2, 3], 4, 3) == []
    assert lookup([7, 1, 7], 4, 3, 1) == [1, 7]                              # down to 1-grams


# -- refusals ---------------------------------------------------------------------------------------------
def test_mismatched_vocabulary_is_refused(models, tiny_models):
    with pytest.raises(InvalidParameterError, match="vocabulary"):
        LLM(models["target"], backend="numpy", n_ctx=128, draft_model=tiny_models["tiny-llama"])


@pytest.mark.parametrize("spec, fragment", [
    ({"method": "draft"}, "needs a draft model"),
    ({"method": "lookup", "num_tokens": 0}, "num_tokens"),
    ({"method": "lookup", "num_tokens": 3, "min_tokens": 4}, "min_tokens"),
    ({"method": "lookup", "wat": 1}, "unknown speculative"),
    ("medusa", "method must be one of"),
    (3, "speculative must be"),
])
def test_bad_speculative_settings_are_refused(models, spec, fragment):
    with pytest.raises(InvalidParameterError, match=fragment):
        LLM(models["target"], backend="numpy", n_ctx=128, speculative=spec)


def test_vllm_spellings():
    cfg = SpeculativeConfig.parse({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5}, False)
    assert (cfg.method, cfg.num_tokens, cfg.ngram) == ("lookup", 4, 5)


@pytest.mark.parametrize("kw, fragment", [
    ({"json": True}, "constrained"), ({"mirostat": 2}, "mirostat"), ({"logprobs": True}, "logprobs")])
def test_unsupported_settings_are_refused(models, kw, fragment):
    llm = LLM(models["target"], backend="numpy", n_ctx=128, speculative="lookup")
    with pytest.raises(InvalidParameterError, match=fragment):
        llm.generate("Hello", max_tokens=4, **kw)


# -- CLI --------------------------------------------------------------------------------------------------
def test_cli_draft_and_lookup_options(models):
    from click.testing import CliRunner

    from oxigpu.cli.main import cli as main
    runner = CliRunner()
    base = ["run", "-m", str(models["target"]), "--backend", "numpy", "-c", "128", "-p", "Hello", "-n", "12",
            "--temp", "0"]
    ref = runner.invoke(main, base)
    assert ref.exit_code == 0, ref.output
    for extra in (["-md", str(models["q8"]), "--draft-max", "3"], ["--lookup", "--spec-ngram-size-n", "2"]):
        res = runner.invoke(main, base + extra)
        assert res.exit_code == 0, res.output
        assert res.stdout == ref.stdout
        assert "speculative:" in res.stderr
    bad = runner.invoke(main, base + ["--lookup", "-md", str(models["q8"])])
    assert bad.exit_code == 1 and "give one" in bad.stderr


def test_bench_locates_a_divergence_and_its_logit_gap(plain):
    """Where two outputs part, the bench reports the token and the plain choice's lead there (teacher-forced
    logits): near zero for a near-tie, large for a real difference."""
    from oxigpu.tools.spec_bench import _divergence, _same
    prompt = plain.tokenize("Once upon a time")
    out = plain.generate(prompt, temperature=0, max_tokens=6).token_ids
    logits = np.asarray(plain.logits(prompt + out[:3]))[-1]
    other = int(np.argsort(logits)[-2])           # the runner-up at token 3
    got = _divergence(plain, prompt, out, out[:3] + [other] + out[4:])
    assert got["diverged_at"] == 3
    assert got["logit_gap"] == pytest.approx(float(logits[out[3]] - logits[other]), abs=1e-4) and got["logit_gap"] >= 0
    assert "from token 3" in _same({"identical": False, **got})
    assert _divergence(plain, prompt, out, out[:4]) == {"diverged_at": 4, "logit_gap": None}   # a prefix: a stop


def test_bench_reports_speed_up_and_acceptance(models):
    import json

    from click.testing import CliRunner

    from oxigpu.cli.main import cli
    res = CliRunner().invoke(cli, ["bench", "-m", str(models["target"]), "--backend", "numpy", "-md",
                                   str(models["target"]), "--draft-max", "3", "-n", "10", "--prompts", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    s = out["summary"]
    assert s["prompts"] == 2 and s["identical"] == 2 and s["acceptance_rate"] == 1.0
    assert s["plain_tok_s"] > 0 and s["spec_tok_s"] > 0 and s["speedup"] > 0
    assert all(r["tokens"] >= 1 and r["drafted"] >= r["accepted"] for r in out["rows"])
    # each side computed its prompt from nothing (prompts of more than a KV block: the cache could serve one)
    assert all(r["prompt_tokens"] > KV_BLOCK and r["cached_tokens"] == [0, 0] for r in out["rows"])


# -- real model -------------------------------------------------------------------------------------------
def test_real_model_greedy_identity(qwen_path):
    """Qwen2.5-Coder 0.5B, 24 greedy tokens: plain, drafted by itself (one engine drafts and verifies: one
    copy of the weights), and by lookup."""
    prompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
    llm = LLM(qwen_path, backend="numpy", n_ctx=256)
    ref = llm.generate(prompt, temperature=0, max_tokens=24).token_ids
    llm.speculate(llm, {"num_tokens": 4})
    assert llm.generate(prompt, temperature=0, max_tokens=24).token_ids == ref
    assert llm.speculative_stats["acceptance_rate"] > 0.9
    llm.speculate(speculative="lookup")
    assert llm.generate(prompt, temperature=0, max_tokens=24).token_ids == ref
    assert llm.speculative_stats["rounds"] > 0
    llm.speculate()
    assert llm.speculative_stats is None and llm.engine.speculator is None


# -- wgpu -------------------------------------------------------------------------------------------------
def test_wgpu_greedy_identity(models, dev, monkeypatch):
    """On the GPU backend (lavapipe in CI): the verification plan of k + 1 rows, greedy drafts from the draft
    model's GPU-resident loop, and lookup give the plain decoder's tokens; the verification draws every row's
    id with the GPU sampler (no logits read back), repetition penalties included (each row's own history)."""
    from oxigpu.runtime.speculative import Speculator
    on_device = []
    orig = Speculator._verify_greedy_on_device
    monkeypatch.setattr(Speculator, "_verify_greedy_on_device",
                        lambda self, *a: on_device.append(orig(self, *a)) or on_device[-1])
    plain = LLM(models["target"], backend="wgpu", n_ctx=64)
    for extra in ({}, {"repeat_penalty": 1.5, "repeat_last_n": 16}):
        ref = plain.generate("Once upon a time", temperature=0, max_tokens=12, **extra).token_ids
        # lookup of 3-grams only: some steps find no draft (the plain steps between rounds)
        for kw in ({"draft_model": models["q8"], "speculative": {"num_tokens": 3}},
                   {"speculative": {"method": "lookup", "ngram": 3, "ngram_min": 3}}):
            on_device.clear()
            llm = LLM(models["target"], backend="wgpu", n_ctx=64, **kw)
            assert llm.generate("Once upon a time", temperature=0, max_tokens=12, **extra).token_ids == ref, kw
            st = llm.speculative_stats
            assert st["rounds"] > 0
            assert on_device and all(out is not None for out in on_device), kw
            # rounds without drafts (lookup found none) took their plain steps on the GPU-resident loop
            assert llm.engine.scheduler.resident_steps >= st["plain_steps"] > 0 or "draft_model" in kw


@pytest.mark.parametrize("T", [6, 12, 16])
def test_wgpu_verification_rows_are_one_row_steps(models, dev, T):
    """On the GPU backend a verification of up to ``PrefillTuning.decode_rows`` rows (drafts of up to 15
    tokens) gives each row's logits bit for bit as a one-row decode step at that position does, on a plan of
    T rows running steps of T and of fewer rows: the greedy identity at every draft length that takes the
    decode attention kernel and the multi-row GEMVs (tiny-qwen2's widths)."""
    from oxigpu.backends.wgpu.tuning import tuning
    from oxigpu.runtime.engine import Engine
    assert T <= tuning("gpu").prefill.decode_rows
    eng = Engine(models["target"], backend="wgpu", n_ctx=96, max_seqs=1)
    toks = [int(t) for t in np.random.default_rng(T).integers(0, eng.vocab_size, 40 + T)]
    blocks = list(range(96 // KV_BLOCK))
    eng.backend.run(eng.plan("all", 40, 1), Step.single(toks[:40], 0, blocks))
    dec = eng.plan("decode", 1, 1)
    one = [eng.backend.run(dec, Step.single([toks[40 + i]], 40 + i, blocks))["logits"][0].copy() for i in range(T)]
    plan = eng.plan("all", T, 1)
    # its matmuls are told they serve one sequence (the GEMV, not the matrix units, up to gemv_rows rows)
    from oxigpu.backends.wgpu.backend import ONE_SEQ_OPS
    for p, want in ((plan, True), (dec, False), (eng.plan("decode", 2, 2), False)):
        mms = [k for k in eng.backend._loaded(p).kernels if k.op in ONE_SEQ_OPS]
        assert mms and all(bool(k.attrs.get("one_seq")) == want for k in mms)
    for n in (T, T // 2 + 1):
        ver = eng.backend.run(plan, Step.single(toks[40:40 + n], 40, blocks))["logits"]
        for i in range(n):
            assert np.array_equal(ver[i], one[i]), (n, i, float(np.abs(ver[i] - one[i]).max()))
