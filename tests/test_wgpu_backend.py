"""WgpuBackend on tiny synthetic models (lavapipe in CI): numpy parity, GPU-resident decode, the engine on
both backends, guards, trace/diff, `info --device`, backend selection without a driver.

Parity tolerance: max |wgpu - numpy| <= 1e-3 x max |logit| (measured over 30 decode steps: 2.5e-5 to 7.1e-5
on tiny-llama, -qwen2 and -gemma3 with the f16 KV cache; 0.5e-6 to 1.4e-6 when it was f32: the two backends'
f32 k and v, ~1e-6 apart, now and then lie on either side of an f16 rounding point, and those elements
then differ by a whole f16 step).
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest
from click.testing import CliRunner

from oxigpu.backends.base import Step
from oxigpu.backends.numpy_backend import NumpyBackend
from oxigpu.backends.wgpu.backend import WgpuBackend
from oxigpu.backends.wgpu.device import Device
from oxigpu.backends.wgpu.kernel import KERNELS
from oxigpu.cli.main import cli
from oxigpu.errors import DeviceError, OutOfMemoryError
from oxigpu.gguf import GGUFFile
from oxigpu.graph.plan import compile
from oxigpu.models import build_graph
from oxigpu.runtime.engine import Engine
from oxigpu.runtime.params import SamplingParams
from oxigpu.runtime.sampling import SamplerConfig, pack_batch, sample

pytestmark = pytest.mark.gpu

N_CTX = 64
REL = 1e-3
SHAPES = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"]
CONFIGS = {
    "greedy": SamplerConfig(),
    "t0.8": SamplerConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=123),
    "penalties+bias": SamplerConfig(temperature=1.0, repeat_penalty=1.3, penalty_last_n=16, frequency_penalty=0.2,
                                    presence_penalty=0.1, seed=7, logit_bias={5: 3.0, 9: -float("inf")}),
}


@pytest.fixture(scope="module")
def synth_files(tmp_path_factory):
    from oxigpu.synth import synthesize
    d = tmp_path_factory.mktemp("synth")
    return {s: synthesize(s, d / f"{s}.gguf", ftype="Q4_K_M", seed=3, workers=1).path for s in SHAPES}


def tokens_for(model: GGUFFile, n: int, seed: int = 5) -> list[int]:
    vocab = len(model.metadata["tokenizer.ggml.tokens"])
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("shape", SHAPES)
def test_logits_match_numpy(dev, synth_files, shape):
    """Chunked prefill (the last chunk padded) then decode: every step's logits agree with numpy's."""
    model = GGUFFile(synth_files[shape])
    toks = np.asarray(tokens_for(model, 30), np.int32)
    prefill = compile(build_graph(model, None, 8, N_CTX, "all"))
    decode = compile(build_graph(model, None, 1, N_CTX, "last"))
    nb, wb = NumpyBackend(model, N_CTX), WgpuBackend(model, N_CTX, dev)
    for pos in range(0, 20, 8):
        n = min(8, 20 - pos)
        ins = Step.single(toks[pos:pos + n], pos)
        ref = nb.run(prefill, ins)["logits"][:n]
        assert np.isfinite(ref).all() and ref.std() > 0.05
        assert rel_err(wb.run(prefill, ins)["logits"][:n], ref) <= REL
    for pos in range(20, 30):
        ins = Step.single(toks[pos:pos + 1], pos)
        assert rel_err(wb.run(decode, ins)["logits"], nb.run(decode, ins)["logits"]) <= REL


@pytest.mark.parametrize("shape", ["tiny-llama", "tiny-gemma3"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_resident_decode_draws_the_host_loop_tokens(dev, synth_files, shape, name):
    """decode_stream (embed -> ... -> sample on the device, ids never leave the GPU between steps) draws
    what the same backend's host loop (``run`` + the numpy sampler) draws, token for token, over batches
    of growing size. Not the numpy backend's tokens: its logits differ by up to ~7e-5 (see the module
    docstring; test_logits_match_numpy bounds it), which moved one of these draws (tiny-gemma3,
    penalties+bias, the 24th token) once the caches were f16."""
    cfg = CONFIGS[name]
    wb, decode, prompt, ctx = _host_loop(dev, synth_files[shape], cfg, N_CTX)
    got = prompt + [ctx[len(prompt)]]
    batches = [ids for ids, _ in wb.decode_stream(decode, got, pack_batch([cfg], [len(got)], [1]), 23)]
    assert [len(b) for b in batches][:3] == [2, 4, 8]
    assert got + [t for b in batches for t in b] == ctx


def test_resident_decode_in_one_batch(dev, synth_files):
    """decode_batch(whole=True) (a speculative round's drafts): every step in one batch, one read-back, the
    same tokens as the host loop."""
    cfg = CONFIGS[next(iter(CONFIGS))]
    wb, decode, prompt, ctx = _host_loop(dev, synth_files["tiny-llama"], cfg, N_CTX, n=8)
    got = prompt + [ctx[len(prompt)]]
    table = list(range(decode.inputs["block_table"].shape[1]))
    batches = [ids for ids, _ in wb.decode_batch(decode, [got], pack_batch([cfg], [len(got)], [1]), 7, [table],
                                                 whole=True)]
    assert len(batches) == 1 and got + [t[0] for t in batches[0]] == ctx


def _host_loop(dev, path, cfg: SamplerConfig, n_ctx: int, n: int = 24):
    """A wgpu backend, its decode plan, a 10-token prompt and the prompt + n tokens its host loop draws
    (``run`` + the numpy sampler: the whole attention grid every step)."""
    model = GGUFFile(path)
    prompt = tokens_for(model, 10)
    prefill = compile(build_graph(model, None, 16, n_ctx, "last"))
    decode = compile(build_graph(model, None, 1, n_ctx, "last"))
    wb = WgpuBackend(model, n_ctx, dev)
    ctx = list(prompt)
    logits = wb.run(prefill, Step.single(np.asarray(ctx), 0))["logits"]
    for i in range(n):
        ctx.append(sample(logits, cfg, ctx, i))
        logits = wb.run(decode, Step.single(np.asarray(ctx[-1:]), len(ctx) - 1))["logits"]
    return wb, decode, prompt, ctx


def test_resident_table_write_is_seen_by_the_next_host_step(dev, synth_files, monkeypatch):
    """The resident loop's block table write goes through the same record as host steps: a host step after
    a resident batch on other blocks writes its table again (not skipped as unchanged), and draws what
    the host loop drew."""
    from oxigpu.backends.wgpu.device import Device

    cfg = CONFIGS["greedy"]
    wb, decode, prompt, ctx = _host_loop(dev, synth_files["tiny-llama"], cfg, N_CTX, n=4)
    mb = decode.inputs["block_table"].shape[1]
    list(wb.decode_stream(decode, ctx[:len(prompt) + 1], pack_batch([cfg], [len(prompt) + 1], [1]), 2,
                          list(range(mb))[::-1]))
    names = []
    write = Device.write
    monkeypatch.setattr(Device, "write", lambda self, buf, data, offset=0:
                        names.append(buf.label) or write(self, buf, data, offset))
    wb.run(decode, Step.single(np.asarray(ctx[-1:]), len(ctx) - 1))
    assert "block_table" in names


@pytest.mark.parametrize("shape", ["tiny-llama", "tiny-gemma3"])
def test_resident_decode_launches_only_the_active_splits(dev, synth_files, shape):
    """With a context allocated far beyond the position, the GPU-resident decode sizes each step's attention
    grid to the splits that step uses (``_Resident.step``; gemma3's window layers and global layers apart)
    and still draws the host loop's tokens, whose ``run`` launches the whole grid."""
    wb, decode, prompt, ctx = _host_loop(dev, synth_files[shape], SamplerConfig(), 1024)
    got = prompt + [ctx[len(prompt)]]
    stream = wb.decode_stream(decode, got, pack_batch([SamplerConfig()], [len(got)], [1]), 23)
    assert got + [t for ids, _ in stream for t in ids] == ctx
    res = next(iter(wb._resident.values()))
    assert res.sized and all(k.decode_groups(len(ctx)) < k.n_groups for _, k in res.sized)
    full = [d.workgroups for d in res.variants[0]]
    step = [d.workgroups for d in res.step(0, len(ctx))]
    assert sum(a != b for a, b in zip(step, full)) == sum(len(idx) for idx, _ in res.sized) > 0


def test_engine_same_generations_on_both_backends(dev, synth_files):
    """Greedy, sampled, a stop string met mid-batch and close() mid-batch: the same tokens, text and finish
    reasons, and every KV block back in the pool after each (blocks taken ahead for resident steps that
    never ran included)."""
    path = synth_files["tiny-qwen2"]
    prompt = [1, 5, 9, 200, 300]
    ref_engine = Engine(path, backend="numpy", n_ctx=N_CTX, prefill_chunk=16)
    probe = ref_engine.start(prompt, SamplingParams(max_tokens=20, temperature=0))
    "".join(probe)
    stop = ref_engine.tokenizer.token_to_piece(probe.result.token_ids[9], special=False).decode("utf-8", "replace")
    runs = [SamplingParams(max_tokens=20, temperature=0), SamplingParams(max_tokens=20, seed=42, repeat_penalty=1.2),
            SamplingParams(max_tokens=20, temperature=0, stop=(stop,))]
    outcome = {}
    for backend in ("numpy", "wgpu"):
        eng = Engine(path, backend=backend, n_ctx=N_CTX, prefill_chunk=16)
        out = []
        for params in runs:
            gen = eng.start(prompt, params)
            text = "".join(gen)
            out.append((text, gen.result.token_ids, gen.result.finish_reason, eng.pool.n_used))
        gen = eng.start(prompt[:3], SamplingParams(max_tokens=40, seed=3))
        for _ in gen:
            if len(gen.generated) >= 5:
                gen.close()
        out.append((list(gen.generated), eng.pool.n_used))
        outcome[backend] = out
    assert outcome["wgpu"][2][2] == "stop" and len(outcome["wgpu"][2][1]) < 20
    assert outcome["wgpu"] == outcome["numpy"]


def test_eval_queues_unread_chunks(dev, synth_files, monkeypatch):
    """A 50-token prompt in 16-token chunks: the first three chunks are queued without reading their logits
    (Backend.run's read=False), the last one read; its logits equal the numpy engine's (float tolerance) and
    the same engine's with every chunk read back (exactly: the same kernels in the same order)."""
    path = synth_files["tiny-qwen2"]
    tokens = [int(t) for t in np.random.default_rng(7).integers(3, 200, 50)]
    ref, _ = Engine(path, backend="numpy", n_ctx=N_CTX, prefill_chunk=16).eval(tokens)
    eng = Engine(path, backend="wgpu", n_ctx=N_CTX, prefill_chunk=16)
    reads = []
    run = eng.backend.run
    monkeypatch.setattr(eng.backend, "run", lambda plan, step, trace=None, read=True, meanwhile=None:
                        reads.append(read) or run(plan, step, trace, read, meanwhile))
    queued, _ = eng.eval(tokens)
    assert reads == [False, False, False, True]
    np.testing.assert_allclose(queued, ref, rtol=0, atol=2e-3 * np.abs(ref).max())
    assert eng.eval(tokens)[1] == 32          # its full block joined the prefix cache as the chunks ran
    monkeypatch.setattr(eng.backend, "run", lambda plan, step, trace=None, read=True, meanwhile=None:
                        run(plan, step, trace, True, meanwhile))
    eng.forget()
    every, _ = eng.eval(tokens)
    assert np.array_equal(queued, every)


def test_unchanged_host_inputs_are_not_rewritten(dev, synth_files, monkeypatch):
    """A step's row_seq, out_rows, block table and (on a plan the resident loop never ran) positions are
    written only when they differ from what their buffer holds: a prompt evaluated again writes its tokens
    and the params but not those, and its logits stay the same; a shorter prompt writes its out_rows and
    positions."""
    from oxigpu.backends.wgpu.device import Device

    eng = Engine(synth_files["tiny-qwen2"], backend="wgpu", n_ctx=N_CTX, prefill_chunk=16)
    tokens = [int(t) for t in np.random.default_rng(8).integers(3, 200, 16)]
    first, _ = eng.eval(tokens)
    names = []
    write = Device.write
    monkeypatch.setattr(Device, "write", lambda self, buf, data, offset=0:
                        names.append(buf.label) or write(self, buf, data, offset))
    eng.forget()
    again, _ = eng.eval(tokens)
    assert np.array_equal(first, again)
    assert not {"row_seq", "out_rows", "block_table", "positions"} & set(names) and "tokens" in names
    names.clear()
    eng.forget()
    eng.eval(tokens[:7])
    assert {"out_rows", "positions"} <= set(names)     # its last row moved, its padded positions differ


def test_prepared_first_pieces_give_the_same_logits(dev, synth_files, monkeypatch):
    """Each prefill chunk's first piece is encoded while the chunk before it runs and submitted after the
    next chunk's input writes: prompts of several chunks give the logits of chunks encoded as they go, and
    a failure to encode ahead only leaves the next chunk to encode its piece itself."""
    from oxigpu.backends.wgpu.device import Device

    prompts = [[int(t) for t in np.random.default_rng(s).integers(3, 200, 40)] for s in (1, 2)]
    used = []
    submit_prepared = Device.submit_prepared
    monkeypatch.setattr(Device, "submit_prepared", lambda self, cb: used.append(1) or submit_prepared(self, cb))
    eng = Engine(synth_files["tiny-qwen2"], backend="wgpu", n_ctx=N_CTX, prefill_chunk=16)
    got = [eng.eval(p)[0] for p in prompts]
    assert len(used) == 5                          # every chunk but the first one's
    monkeypatch.setattr(Device, "prepare", lambda self, ds: None)
    plain = Engine(synth_files["tiny-qwen2"], backend="wgpu", n_ctx=N_CTX, prefill_chunk=16)
    for p, g in zip(prompts, got):
        assert np.array_equal(plain.eval(p)[0], g)
    assert len(used) == 5

    def fail(self, ds):
        raise DeviceError("encoding failed")
    monkeypatch.setattr(Device, "prepare", fail)     # after the step's submits: it still completes
    failing = Engine(synth_files["tiny-qwen2"], backend="wgpu", n_ctx=N_CTX, prefill_chunk=16)
    for p, g in zip(prompts, got):
        assert np.array_equal(failing.eval(p)[0], g)
    assert len(used) == 5


def test_positions_the_resident_loop_advanced_are_written_again(dev, synth_files, monkeypatch):
    """The resident loop advances a plan's positions on the device: a host step at the position the host
    last wrote, after a resident stream on that plan, writes them again and gets the logits it got before
    (the stream rewrote the cache rows with the same greedy tokens)."""
    from oxigpu.backends.wgpu.device import Device

    cfg = CONFIGS["greedy"]
    wb, decode, prompt, ctx = _host_loop(dev, synth_files["tiny-llama"], cfg, N_CTX, n=4)
    last = Step.single(np.asarray(ctx[-1:]), len(ctx) - 1)
    before = wb.run(decode, last)["logits"].copy()

    def stream():
        list(wb.decode_stream(decode, ctx[:len(prompt) + 1], pack_batch([cfg], [len(prompt) + 1], [1]), 6))
    stream()                                        # builds the plan's resident variant
    assert rel_err(wb.run(decode, last)["logits"], before) <= REL
    stream()                                        # runs it again, the host having written positions since
    names = []
    write = Device.write
    monkeypatch.setattr(Device, "write", lambda self, buf, data, offset=0:
                        names.append(buf.label) or write(self, buf, data, offset))
    after = wb.run(decode, last)["logits"]
    assert "positions" in names
    assert rel_err(after, before) <= REL


def test_interleaved_generations(dev, synth_files):
    """Two generations stepping in turn on one wgpu engine each get what they get alone (each notices the
    other used the cache and re-establishes its own context)."""
    eng = Engine(synth_files["tiny-llama"], backend="wgpu", n_ctx=N_CTX, prefill_chunk=16)
    a_params, b_params = SamplingParams(max_tokens=12, seed=1), SamplingParams(max_tokens=12, temperature=0)
    alone = []
    for prompt, params in (([1, 2, 3], a_params), ([7, 8], b_params)):
        g = eng.start(prompt, params)
        "".join(g)
        alone.append(g.result.token_ids)
    ga, gb = eng.start([1, 2, 3], a_params), eng.start([7, 8], b_params)
    while ga.result is None or gb.result is None:
        for g in (ga, gb):
            next(g, None)
    assert [ga.result.token_ids, gb.result.token_ids] == alone


def test_prefill_chunk_per_backend(dev, synth_files, monkeypatch):
    """numpy and CPU adapters keep 64-token prefill chunks, a GPU adapter 512; an explicit chunk wins."""
    path = synth_files["tiny-llama"]
    assert NumpyBackend.prefill_chunk == 64
    assert WgpuBackend(GGUFFile(path), N_CTX, dev).prefill_chunk == (64 if dev.is_software else 512)
    assert Engine(path, backend="wgpu", n_ctx=200).prefill_chunk == (64 if dev.is_software else 200)
    assert Engine(path, backend="numpy", n_ctx=N_CTX, prefill_chunk=16).prefill_chunk == 16
    monkeypatch.setattr(Device, "is_software", property(lambda self: False))
    assert WgpuBackend(GGUFFile(path), N_CTX, dev).prefill_chunk == 512


def test_trace_reset_and_memory(dev, synth_files):
    model = GGUFFile(synth_files["tiny-qwen3"])
    plan = compile(build_graph(model, None, 4, N_CTX, "last", fuse=False))   # a plain kv_store to trace
    wb = WgpuBackend(model, N_CTX, dev)
    seen = []
    out = wb.run(plan, Step.single(np.array([3, 4, 5]), 0), trace=lambda node, outs: seen.append((node, outs)))
    assert [n for n, _ in seen] == plan.nodes
    node, caches = next((n, o) for n, o in seen if n.op == "kv_store")
    assert len(caches) == 2 and caches[0].shape[0] == N_CTX and np.abs(caches[0][:3]).max() > 0
    assert np.array_equal(seen[-1][1][0], out["logits"])
    assert wb.memory_bytes() > sum(model.tensors[v.tensor].nbytes for v in plan.weights)
    wb.reset()
    k = next(v for v in plan.states)
    assert not dev.read(wb._states[k.name][0], np.float16, k.shape).any()


@pytest.mark.parametrize("backend", ["numpy", "wgpu"])
def test_loaded_plans_are_keyed_by_plan_key_and_not_held(dev, synth_files, backend):
    """Backends key what they load for a plan (and its GPU-resident variants) by Plan.key, unique in the
    process where id() is not: they hold no reference to the plan, so a dropped plan is freed, and plans
    compiled after it (which may reuse its id) get entries of their own and run correctly."""
    model = GGUFFile(synth_files["tiny-llama"])
    be = NumpyBackend(model, N_CTX) if backend == "numpy" else WgpuBackend(model, N_CTX, dev)
    a = compile(build_graph(model, None, 1, N_CTX, "last"))
    be.load(a)
    if be.resident is not None:
        be.resident.resident_step(a, pack_batch([SamplerConfig()], [1], [0]))
    held, key = weakref.ref(a), a.key
    del a
    gc.collect()
    assert held() is None
    plans = [compile(build_graph(model, None, 8, N_CTX, "all")) for _ in range(3)]
    assert len({key, *(p.key for p in plans)}) == 4
    step = Step.single(np.asarray(tokens_for(model, 8), np.int32), 0)
    got = be.run(plans[-1], step)["logits"]
    ref = NumpyBackend(model, N_CTX).run(compile(build_graph(model, None, 8, N_CTX, "all")), step)["logits"]
    assert got.shape == ref.shape and rel_err(got, ref) <= REL


def test_memory_guard(dev, synth_files):
    """A KV cache bigger than a storage binding is refused before anything is allocated, with numbers."""
    model = GGUFFile(synth_files["tiny-llama"])
    plan = compile(build_graph(model, None, 1, N_CTX, "last"))
    with dev.binding_limit(4096):        # each f16 cache is 8 KiB, the largest activation 4 KiB
        wb = WgpuBackend(model, N_CTX, dev)
        with pytest.raises(OutOfMemoryError, match=r"n_ctx \(now 64; the KV cache takes .* B per token\)"):
            wb.load(plan)
    assert wb.memory_bytes() == 0


def test_weights_split_across_bindings(dev, synth_files):
    """Tables larger than a binding (here: a 64 KiB limit) are bound as row ranges; logits do not change."""
    model = GGUFFile(synth_files["tiny-qwen2"])
    plan = compile(build_graph(model, None, 1, N_CTX, "last"))
    ins = Step.single([17], 0)
    ref = NumpyBackend(model, N_CTX).run(plan, ins)["logits"]
    with dev.binding_limit(65536):
        wb = WgpuBackend(model, N_CTX, dev)
        wb.load(plan)
    assert max(model.tensors[v.tensor].nbytes for v in plan.weights) > 65536
    assert rel_err(wb.run(plan, ins)["logits"], ref) <= REL


def test_diff_cli(dev, synth_files):
    path = str(synth_files["tiny-gemma3"])
    res = CliRunner().invoke(cli, ["diff", "-m", path, "-p", "hello world, hello"])
    assert res.exit_code == 0 and "nodes agree" in res.output, res.output
    res = CliRunner().invoke(cli, ["diff", "-m", path, "-p", "hello world, hello", "--atol", "0", "--rtol", "0"])
    assert res.exit_code == 1 and "first divergence" in res.output and "max |diff|" in res.output, res.output


def test_info_device(dev):
    res = CliRunner().invoke(cli, ["info", "--device", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)["device"]
    assert data["name"] == dev.info()["name"] and data["limits"]["max-buffer-size"] > 0
    res = CliRunner().invoke(cli, ["info", "--device"])
    assert res.exit_code == 0 and "max-storage-buffer-binding-size" in res.output and "features:" in res.output
    assert ("int8 x, integer dots" if dev.int8_dots else "float dots") in res.output
    assert data["int8_dots"] is dev.int8_dots


def _no_driver(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "VK_DRIVER_FILES": "/nonexistent", "VK_ICD_FILENAMES": "/nonexistent"}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)


def test_without_a_vulkan_driver(synth_files):
    """--backend wgpu fails with the install hint; auto falls back to numpy with one warning line."""
    res = _no_driver(["-m", "oxigpu", "run", "-m", str(synth_files["tiny-llama"]), "-p", "hi", "-n", "2",
                      "--backend", "wgpu"])
    assert res.returncode == 1 and "no Vulkan/Metal/D3D12 GPU adapter" in res.stderr, res.stderr
    assert "apt-get install libvulkan1 mesa-vulkan-drivers" in res.stderr
    res = _no_driver(["-c", "from oxigpu.runtime.engine import select_backend as s; print(s('auto'), s('auto'))"])
    assert res.stdout.split() == ["numpy", "numpy"]
    warnings = [line for line in res.stderr.splitlines() if "numpy backend" in line]
    assert len(warnings) == 1 and "no usable GPU adapter" in warnings[0], res.stderr


@pytest.mark.parametrize("n", [3, 70, 140])
def test_short_prompt_in_a_long_prefill_plan(dev, synth_files, n):
    """A prompt far shorter than the prefill plan (the GPU default is 512 rows): the GEMMs skip the row
    tiles past n_tokens; every real row's logits still agree with numpy's (f32 rounding on lavapipe; on a
    GPU, whose prefill GEMMs round x to int8 or f16, within the gemv-sized int8 parity bound of
    tests/test_wgpu_parity.py)."""
    model = GGUFFile(synth_files["tiny-llama"])
    toks = np.asarray(tokens_for(model, n, seed=n), np.int32)
    plan = compile(build_graph(model, None, 160, 192, "all"))
    ref = NumpyBackend(model, 192).run(plan, Step.single(toks, 0))["logits"][:n]
    assert np.isfinite(ref).all() and ref.std() > 0.05
    bound = 3e-2 if dev.int8_dots or dev.has_mma else REL
    assert rel_err(WgpuBackend(model, 192, dev).run(plan, Step.single(toks, 0))["logits"][:n], ref) <= bound


def test_parallel_build_matches_the_serial_one(dev, synth_files, monkeypatch):
    """Kernels built on compile_threads workers during the weight upload (each load on a fresh device, so
    every pipeline compiles there) give the serial build's pipelines, kernels, dispatch grids and logits;
    a node failing on a worker (compile_threads is still 3) raises its own error, naming the node."""
    model = GGUFFile(synth_files["tiny-qwen2"])
    ins = Step.single(np.asarray(tokens_for(model, 8), np.int32), 0)
    built = []
    for threads in (0, 3):
        monkeypatch.setattr(WgpuBackend, "compile_threads", threads)
        plans = [compile(build_graph(model, None, t, N_CTX, "last")) for t in (8, 1)]
        wb = WgpuBackend(model, N_CTX, Device())
        assert wb.compile_threads == threads
        for p in plans:
            wb.load(p)
        loaded = [wb._loaded(p) for p in plans]
        built.append((set(wb.dev._pipelines),
                      [[(type(k).__name__, [(d.pipeline.label, d.workgroups) for d in ds])
                        for k, ds in zip(ld.kernels, ld.node_dispatches)] for ld in loaded],
                      wb.run(plans[0], ins)["logits"]))
    (keys0, kernels0, logits0), (keys1, kernels1, logits1) = built
    assert keys0 == keys1 and kernels0 == kernels1
    assert rel_err(logits1, logits0) <= 1e-6          # same pipelines and data: equal up to rounding
    broken = type("Broken", (KERNELS["attention"],), {"__init__": lambda self, *a: _raise(DeviceError("boom"))})
    monkeypatch.setitem(KERNELS, "attention", broken)
    with pytest.raises(DeviceError, match=r"node '.*' \(op attention, .*\(kernel Broken\): boom"):
        WgpuBackend(model, N_CTX, dev).load(compile(build_graph(model, None, 8, N_CTX, "last")))


def _raise(e: Exception):
    raise e


def test_long_context_steps_take_key_units(dev, synth_files, monkeypatch):
    """A one-sequence plan whose chunks reach ``mma_deep_keys`` (48 here) runs its prefill attention with key
    units (attention/units.wgsl: each row block's keys cut into units, a workgroup each, merged by
    attention_merge_units.wgsl): one merge dispatch more per attention node, and every chunk's logits agree
    with numpy's, on the FMA kernel (lavapipe) and the matrix-unit one alike."""
    import dataclasses

    from oxigpu.backends.wgpu import tuning as T

    cls = T.device_class(dev)
    t = T.TUNING[cls]
    monkeypatch.setitem(T.TUNING, cls, dataclasses.replace(t, prefill=dataclasses.replace(t.prefill,
                                                                                           mma_deep_keys=48)))
    model = GGUFFile(synth_files["tiny-qwen2"])
    toks = np.asarray(tokens_for(model, 64), np.int32)
    # a plan of 20 rows running steps of 16: plans of at most PrefillTuning.decode_rows take the decode kernel
    plan = compile(build_graph(model, None, 20, N_CTX, "all"))
    wb, nb = WgpuBackend(model, N_CTX, dev), NumpyBackend(model, N_CTX)
    loaded = wb._loaded(plan)
    n_attn = sum(n.op == "attention" for n in loaded.nodes)
    assert n_attn and loaded.deep_keys == 48
    assert len(loaded.deep_dispatches) == len(loaded.dispatches) + n_attn
    assert all(k.deep.units > 1 for k in loaded.kernels if getattr(k, "deep", None) is not None)
    bound = 3e-2 if dev.int8_dots or dev.has_mma else REL
    for pos in range(0, 64, 16):
        step = Step.single(toks[pos:pos + 16], pos)
        assert rel_err(wb.run(plan, step)["logits"], nb.run(plan, step)["logits"]) <= bound, pos


def test_long_context_steps_take_the_deep_attention_variant(dev, synth_files, monkeypatch):
    """A one-sequence plan whose prefill attention has a variant for long contexts (``OpKernel.deep``: the
    matrix-unit kernel where the FMA one is chosen for its row blocks) submits it for chunks whose keys
    reach ``deep_keys``, the FMA kernel's dispatches below that, and the prepared first piece of the
    variant the chunk takes; every chunk's logits agree with numpy's. Where the device has no matrix units
    (lavapipe), the variant is the FMA kernel with another tile: the same selection, a real kernel."""
    import dataclasses

    from oxigpu.backends.wgpu import tuning as T
    from oxigpu.backends.wgpu.ops.attention import Attention

    deep_keys = 48
    if dev.has_mma:
        cls = T.device_class(dev)
        t = T.TUNING[cls]
        monkeypatch.setitem(T.TUNING, cls, dataclasses.replace(t, prefill=dataclasses.replace(
            t.prefill, mma_deep_keys=deep_keys)))
    else:
        init = Attention.__init__

        def with_variant(self, *a, **kw):
            init(self, *a, **kw)
            if self.prefill and "prefill_tile" not in self.attrs:
                self.deep = Attention(self.dev, {**self.attrs, "prefill_tile": "8:1:1"}, self.in_shapes,
                                      self.in_types, self.out_shapes)
                self.deep_keys = deep_keys
        monkeypatch.setattr(Attention, "__init__", with_variant)
    model = GGUFFile(synth_files["tiny-qwen2"])
    toks = np.asarray(tokens_for(model, 64), np.int32)
    # a plan of 20 rows running steps of 16: plans of at most PrefillTuning.decode_rows take the decode kernel
    plan = compile(build_graph(model, None, 20, N_CTX, "all"))
    wb, nb = WgpuBackend(model, N_CTX, dev), NumpyBackend(model, N_CTX)
    loaded = wb._loaded(plan)
    assert loaded.deep_dispatches is not None and loaded.deep_keys == deep_keys
    deep_pipes = {d.pipeline for d in loaded.deep_dispatches} - {d.pipeline for d in loaded.dispatches}
    assert deep_pipes
    seen, prepared = [], {}
    submit, prepare, submit_prepared = Device.submit, Device.prepare, Device.submit_prepared

    def spy_prepare(self, ds):
        cb = prepare(self, ds)
        prepared[id(cb)] = list(ds)
        return cb
    monkeypatch.setattr(Device, "submit", lambda self, ds: seen.append(list(ds)) or submit(self, ds))
    monkeypatch.setattr(Device, "prepare", spy_prepare)
    monkeypatch.setattr(Device, "submit_prepared", lambda self, cb: seen.append(prepared[id(cb)]) or
                        submit_prepared(self, cb))
    bound = 3e-2 if dev.int8_dots or dev.has_mma else REL
    for pos in range(0, 64, 16):
        seen.clear()
        step = Step.single(toks[pos:pos + 16], pos)
        got = wb.run(plan, step)["logits"]
        assert rel_err(got, nb.run(plan, step)["logits"]) <= bound
        deep = pos + 16 >= deep_keys
        # the whole plan, once (a variant with key units adds its merge dispatches)
        assert sum(map(len, seen)) == len(loaded.deep_dispatches if deep else loaded.dispatches)
        used = {d.pipeline for ds in seen for d in ds}
        assert bool(used & deep_pipes) == deep, pos
