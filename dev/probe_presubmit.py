"""Where a prefill chunk's host time before its first submit goes: wraps the engine's, backend's and
device's steps (whichever exist in the tree at hand) with timestamps and prints, per label, the median
time of its first entry and its first return after Engine.eval starts (ms), over evals of NP tokens into
an empty cache. Runs on the ce6912e tree too, so two trees compare in one call (docs/perf-log.md).

    PYTHONPATH=<tree> python3 dev/probe_presubmit.py MODEL.gguf REPS"""
import functools
import importlib
import statistics as st
import sys
import time

import numpy as np

from oxigpu.runtime.engine import Engine

NP = 512
marks: list[tuple[str, float]] = []
TARGETS = ["oxigpu.runtime.engine:Engine._checked", "oxigpu.runtime.engine:Engine.forward",
           "oxigpu.runtime.engine:Engine.plan", "oxigpu.runtime.kvcache:BlockPool.match",
           "oxigpu.runtime.scheduler:Scheduler.make_room", "oxigpu.backends.base:Step.single",
           "oxigpu.backends.base:Step.padded_inputs", "oxigpu.backends.wgpu.backend:WgpuBackend.run",
           "oxigpu.backends.wgpu.backend:WgpuBackend._loaded", "oxigpu.backends.wgpu.backend:step_inputs",
           "oxigpu.backends.wgpu.device:Device.write", "oxigpu.backends.wgpu.device:Device.write_params",
           "oxigpu.backends.wgpu.device:Device.submit", "oxigpu.backends.wgpu.device:Device.encode",
           "oxigpu.backends.wgpu.device:Device.submit_prepared", "oxigpu.backends.wgpu.device:Device.prepare",
           "oxigpu.backends.wgpu.device:Device.read"]


def wrap(target: str) -> None:
    mod, _, path = target.partition(":")
    try:
        owner = importlib.import_module(mod)
    except ImportError:
        return
    *outer, name = path.split(".")
    for o in outer:
        owner = getattr(owner, o, None)
        if owner is None:
            return
    fn = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if fn is None:
        return
    raw = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn

    @functools.wraps(raw)
    def timed(*a, **k):
        marks.append((name + ">", time.perf_counter()))
        try:
            return raw(*a, **k)
        finally:
            marks.append((name + "<", time.perf_counter()))
    setattr(owner, name, classmethod(timed) if isinstance(fn, classmethod) else timed)


for t in TARGETS:
    wrap(t)
F, reps = sys.argv[1], int(sys.argv[2])
e = Engine(F, backend="wgpu", n_ctx=NP + 128, prefill_chunk=NP)
firsts: dict[str, list[float]] = {}
for r in range(reps + 1):
    if hasattr(e, "forget"):
        e.forget()
    ids = np.random.default_rng(r).integers(0, e.vocab_size, NP).tolist()
    marks.clear()
    t0 = time.perf_counter()
    e.eval(ids)
    t1 = time.perf_counter()
    if r:
        seen = {}
        for k, t in marks:
            seen.setdefault(k, t)
        for k, t in seen.items():
            firsts.setdefault(k, []).append((t - t0) * 1e3)
        firsts.setdefault("eval<", []).append((t1 - t0) * 1e3)
print(" ".join(f"{k}{st.median(v):.3f}" for k, v in sorted(firsts.items(), key=lambda kv: st.median(kv[1]))))
