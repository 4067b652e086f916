"""Model load to the first token in this (fresh) process, split into stages; one JSON line on stdout.

    python dev/bench_load.py MODEL [--n-ctx N] [--threads N]

Marks (seconds from the start, each the end of a stage): ``import`` (oxigpu, wgpu), ``gguf`` (GGUF
header), ``device_start`` (tokenizer built), ``device`` (Vulkan instance, adapter and device), ``plans``
(graph build and compile), ``prefill`` and ``decode`` (``WgpuBackend.load`` of each plan: weight upload
and kernels), ``first_token`` (one token evaluated, as ``oxigpu bench`` times its load: its ``load_s`` is
``first_token - import``). Also the pipelines compiled and the seconds spent inside ``Device.pipeline``
summed over threads (waits for another thread's compile included). ``--threads`` sets
``WgpuBackend.compile_threads`` (default: its own choice). ``--trace`` adds a second line: each driver
call that compiles (name, label, start, seconds); with ``--gil-probe`` a Python thread counts meanwhile
(its rate during the calls stays near its idle rate only when the calls release the GIL; it slows the
load's own Python work).

The NVIDIA driver keeps compiled shaders on disk; for a cold load point ``__GL_SHADER_DISK_CACHE_PATH``
at an empty folder (and keep it for the warm load after it).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

T0 = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import wgpu  # noqa: E402,F401

from oxigpu.backends.wgpu import backend as wgpu_backend  # noqa: E402
from oxigpu.backends.wgpu.device import Device  # noqa: E402
from oxigpu.runtime.engine import Engine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--trace", action="store_true", help="time each driver compile call")
    ap.add_argument("--gil-probe", action="store_true", help="count in a Python thread during the calls")
    args = ap.parse_args()
    marks = {"import": time.perf_counter() - T0}
    compiled: list[float] = []
    lock = threading.Lock()
    orig_pipeline, orig_init = Device.pipeline, Device.__init__
    orig_load = wgpu_backend.WgpuBackend.load

    def pipeline(self, file, entry="main", defines=None):
        n = len(self._pipelines)
        t = time.perf_counter()
        pipe = orig_pipeline(self, file, entry, defines)
        if len(self._pipelines) > n:   # this call may have compiled (a racing call on a new key may count it)
            with lock:
                compiled.append(time.perf_counter() - t)
        return pipe

    def init(self, *a, **k):
        marks["device_start"] = time.perf_counter() - T0
        orig_init(self, *a, **k)
        if args.trace:   # every driver call that compiles: (what, label, start, seconds, spinner count)
            for name in ("create_shader_module", "create_compute_pipeline"):
                setattr(self.device, name, traced(name, getattr(self.device, name)))
        marks["device"] = time.perf_counter() - T0

    calls: list[tuple] = []
    spins = [0]

    def traced(name, fn):
        def call(**kw):
            t, c = time.perf_counter(), spins[0]
            out = fn(**kw)
            calls.append((name, kw.get("label", ""), round(t - T0, 3), round(time.perf_counter() - t, 3),
                          spins[0] - c))
            return out
        return call

    def spin():   # a pure-Python loop: it advances only while no other thread holds the GIL
        while True:
            spins[0] += 1

    spin_idle = None
    if args.gil_probe:
        threading.Thread(target=spin, daemon=True).start()
        t, c = time.perf_counter(), spins[0]
        time.sleep(0.2)
        spin_idle = (spins[0] - c) / (time.perf_counter() - t)
    loads = iter(("prefill", "decode"))

    def load(self, plan):
        first = self._loaded(plan) is None
        orig_load(self, plan)
        if first:
            marks[next(loads, "other")] = time.perf_counter() - T0

    Device.pipeline, Device.__init__, wgpu_backend.WgpuBackend.load = pipeline, init, load
    if args.threads is not None:
        wgpu_backend.WgpuBackend.compile_threads = args.threads

    def progress(stage, done, total):
        if stage == "building tokenizer":
            marks["gguf"] = time.perf_counter() - T0
        if stage == "loading weights" and done == 3:
            marks["plans"] = time.perf_counter() - T0

    engine = Engine(args.model, backend="wgpu", n_ctx=args.n_ctx, progress=progress)
    logits, _ = engine.eval([1])
    int(np.argmax(logits))
    marks["first_token"] = time.perf_counter() - T0
    print(json.dumps({"model": Path(args.model).name, "n_ctx": engine.n_ctx,
                      "threads": engine.backend.compile_threads,
 "marks": {k: round(v, 3) for k, v in marks.items()},
                      "pipelines": engine.backend.dev.pipeline_count, "compiles_timed": len(compiled),
                      "compile_s_summed": round(sum(compiled), 3)}))
    if args.trace:
        busy = sum(d for _, _, _, d, _ in calls)
        print(json.dumps({"spin_per_s_idle": spin_idle and round(spin_idle), "spin_per_s_in_calls":
                          round(sum(c for *_, c in calls) / max(busy, 1e-9)), "calls": calls}))


if __name__ == "__main__":
    main()
