"""AsyncLLM through its public surface on a tiny synthetic model (numpy): the same tokens as LLM.generate
alone, concurrent streams that interleave without mixing, events that add up to the result, cancellation
that stops a request and releases it, a bounded queue, and close()."""
from __future__ import annotations

import asyncio

import pytest

from oxigpu import LLM, SamplingParams
from oxigpu.aio import AsyncLLM, ClosedError, QueueFullError
from oxigpu.errors import ContextLengthError, InvalidParameterError

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)
SAMPLED = SamplingParams(max_tokens=8, temperature=1.3, top_k=0, top_p=1.0, min_p=0.0, seed=5)
N_CTX = 256


@pytest.fixture(scope="module")
def path(tiny_models) -> str:
    return tiny_models["tiny-qwen2"]


@pytest.fixture(scope="module")
def ref(path) -> LLM:
    return LLM(path, backend="numpy", n_ctx=N_CTX)


def run(coro_fn, path, **kwargs):
    """Run `coro_fn(llm)` on a fresh AsyncLLM in a fresh event loop, closing it after."""
    async def main():
        async with AsyncLLM(path, backend="numpy", n_ctx=N_CTX, **kwargs) as llm:
            return await coro_fn(llm)
    return asyncio.run(main())


async def until(condition, seconds: float = 10.0) -> None:
    """Wait until `condition()` holds (the worker thread admits and releases requests asynchronously)."""
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


def ban_eog(tokenizer, params: SamplingParams) -> SamplingParams:
    """`params` with every end-of-generation token banned, so a run lasts its max_tokens."""
    return params.with_overrides(logit_bias={t: float("-inf") for t in tokenizer.eog_ids})


def test_generate_and_stream_equal_llm_alone(path, ref):
    prompts = [f"prompt number {i}" for i in range(6)]
    expected = [ref.generate(p, GREEDY) for p in prompts] + [ref.generate("Once upon", SAMPLED)]

    async def body(llm: AsyncLLM):
        assert (llm.n_ctx, llm.arch, llm.model_path.name) == (N_CTX, ref.arch, ref.model_path.name)
        # all at once: they interleave step by step (max_seqs=4, two wait) and still get their own tokens
        results = await asyncio.gather(*[llm.generate(p, GREEDY) for p in prompts],
                                       llm.generate(ref.tokenize("Once upon"), SAMPLED))
        events = [e async for e in llm.stream("Once upon", SAMPLED)]
        lp_events = [e async for e in llm.stream("Once upon", SAMPLED.with_overrides(logprobs=True, top_logprobs=2))]
        return results, events, lp_events

    results, events, lp_events = run(body, path, max_seqs=4)
    assert [r.token_ids for r in results] == [e.token_ids for e in expected]
    assert [r.text for r in results] == [e.text for e in expected]
    # the events add up to the result, which only the last one carries
    last = events[-1].result
    assert last is not None and all(e.result is None for e in events[:-1])
    assert "".join(e.text for e in events) == last.text == expected[-1].text
    assert [t for e in events for t in e.token_ids] == list(last.token_ids)
    assert all(e.logprobs is None for e in events)
    # asked for, each event carries its tokens' logprobs; together they are the result's
    with_lp = lp_events[-1].result
    assert [t for e in lp_events for t in e.logprobs] == list(with_lp.logprobs)
    assert [lp.token_id for lp in with_lp.logprobs] == list(with_lp.token_ids) == list(last.token_ids)


def test_cancelled_requests_stop_and_are_released(path, ref):
    long = ban_eog(ref.tokenizer, SamplingParams(max_tokens=200, temperature=0.0))

    async def body(llm: AsyncLLM):
        seen = []
        # aclose() after one event: running no more, released (stats back to idle) when it returns
        stream = llm.stream("to be abandoned", long)
        seen.append(await stream.__anext__())
        await stream.aclose()
        idle_after_aclose = llm.stats()
        # a consuming task cancelled mid-stream cancels its request too
        task = asyncio.ensure_future(llm.generate("also abandoned", long))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: llm.stats().running == 0)
        idle_after_cancel = llm.stats()
        # and the model serves the next request exactly as before
        after = await llm.generate("prompt number 1", GREEDY)
        return seen, idle_after_aclose, idle_after_cancel, after

    seen, a, b, after = run(body, path)
    assert seen[0].result is None and len(seen[0].token_ids) >= 1
    assert (a.running, a.queue_depth, a.kv_blocks_used) == (0, 0, 0)
    assert (b.running, b.queue_depth, b.kv_blocks_used) == (0, 0, 0)
    assert a.kv_blocks_total == 8 * N_CTX // 32      # the pool: max_seqs (8) full contexts
    assert after.token_ids == ref.generate("prompt number 1", GREEDY).token_ids


def test_queue_is_bounded_and_errors_come_at_submit(path, ref):
    long = ban_eog(ref.tokenizer, SamplingParams(max_tokens=100, temperature=0.0))

    async def body(llm: AsyncLLM):
        running = [llm.stream(f"job {i}", long) for i in range(3)]     # 1 running + 2 waiting: full
        await until(lambda: llm.stats().running == 1)
        with pytest.raises(QueueFullError, match="queue is full"):
            llm.stream("one too many", GREEDY)
        stats = llm.stats()
        # bad input is refused before anything is queued
        with pytest.raises(InvalidParameterError):
            llm.stream("", GREEDY)
        with pytest.raises(ContextLengthError):
            llm.stream([1] * N_CTX, GREEDY)
        with pytest.raises(InvalidParameterError):
            llm.stream([10**9], GREEDY)
        for s in running:
            await s.aclose()
        ok = await llm.generate("room again", GREEDY)
        return stats, ok

    stats, ok = run(body, path, max_seqs=1, max_queue=2)
    assert (stats.running, stats.queue_depth) == (1, 2)
    assert ok.token_ids == ref.generate("room again", GREEDY).token_ids


def test_close_ends_running_and_waiting_requests(path, ref):
    long = ban_eog(ref.tokenizer, SamplingParams(max_tokens=500, temperature=0.0))

    async def main():
        llm = AsyncLLM(path, backend="numpy", n_ctx=N_CTX, max_seqs=1)
        tasks = [asyncio.ensure_future(llm.generate(f"job {i}", long)) for i in range(2)]
        await asyncio.sleep(0.05)
        await llm.close()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        with pytest.raises(ClosedError):
            llm.stream("after close", GREEDY)
        return outcomes

    outcomes = asyncio.run(main())
    assert all(isinstance(o, ClosedError) for o in outcomes), outcomes


def test_construction_is_validated(path):
    for kwargs in ({"max_seqs": 0}, {"max_queue": -1}, {"kv_memory": 0}, {"max_seqs": True}):
        with pytest.raises(InvalidParameterError):
            AsyncLLM(path, backend="numpy", **kwargs)


def test_warmup_builds_every_batch_plan_before_the_first_request(path, ref):
    """With warmup, no batch size compiles a plan mid-serving (seconds each on a GPU): five requests at once
    grow the batch through the buckets 1, 2, 4 and 5 on plans that were all built at construction."""
    stages: list[str] = []

    async def go(llm):
        built = set(llm._engine._plans)
        assert {("decode", b, b) for b in (1, 2, 4, 5)} | {("mixed", llm._engine.prefill_chunk, 5)} <= built
        results = await asyncio.gather(*(llm.generate(f"prompt {i}", GREEDY) for i in range(5)))
        assert set(llm._engine._plans) == built
        return results

    async def main():
        async with AsyncLLM(path, backend="numpy", n_ctx=N_CTX, max_seqs=5, warmup=True,
                            progress=lambda stage, done, total: stages.append(stage)) as llm:
            return await go(llm)
    results = asyncio.run(main())
    assert [r.token_ids for r in results] == [ref.generate(f"prompt {i}", GREEDY).token_ids for i in range(5)]
    assert "warming up: 5 at once" in stages and stages[-1] == "warm"
