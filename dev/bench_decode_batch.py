"""Where a GPU-resident decode step's time goes between the GPU and the host (docs/perf-log.md, session 11).

    python3 dev/bench_decode_batch.py MODEL.gguf      # on the GPU machine

GPU timestamps around K = 32 steps encoded three ways: each step after a params copy in its own pass (the
encoding before `8ba9fdc`), each step in its own pass, and all K in one pass as `decode_stream` encodes a
batch now (a next_params dispatch per step); then the wall time per token of `decode_stream` (128 tokens)
per resident batch size, and the host's encode + submit time per step with the GPU busy.
"""
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.wgpu.device import Params  # noqa: E402
from oxigpu.runtime.engine import Engine  # noqa: E402
from oxigpu.runtime.sampling import SamplerConfig, pack_batch  # noqa: E402

K = 32
eng = Engine(sys.argv[1], backend="wgpu", n_ctx=512)
be, plan = eng.backend, eng._decode
dev = be.dev
ctx = list(range(1, 65))
eng.eval(ctx[:-1])
cfg = SamplerConfig(temperature=0.0)
batch = pack_batch([cfg], [len(ctx)], [0])
for _ in be.decode_stream(plan, ctx, batch, 1):     # builds the resident plan, leaves step 63's params
    pass
res = be._resident_for(plan, batch)
wgpu = dev._wgpu
params = Params(n_tokens=1, pos=63)
copy_src = dev.upload(params.pack() * K)


def per_step_us(build, reps: int = 7) -> float:
    """Median GPU microseconds per step between the first pass's start and the last one's end."""
    out = []
    for _ in range(reps):
        qs = dev.device.create_query_set(type="timestamp", count=2)
        buf = dev.device.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        enc = dev.device.create_command_encoder()
        build(enc, qs)
        enc.resolve_query_set(qs, 0, 2, buf, 0)
        dev.queue.submit([enc.finish()])
        t = np.frombuffer(dev.queue.read_buffer(buf), np.uint64).astype(np.int64)
        out.append((t[1] - t[0]) * 1e-9 / K)
    return statistics.median(out) * 1e6


def pass_per_step(copy: bool):
    def build(enc, qs):
        for j in range(K):
            if copy:
                enc.copy_buffer_to_buffer(copy_src, j * Params.NBYTES, dev.params_buffer, 0, Params.NBYTES)
            tw = {"query_set": qs}
            if j == 0:
                tw["beginning_of_pass_write_index"] = 0
            if j == K - 1:
                tw["end_of_pass_write_index"] = 1
            dev.encode(enc, res.variants[j % 2], tw if len(tw) > 1 else None)
    return build


def one_pass(enc, qs):
    nxt = be._next_params[0]
    dev.encode(enc, [d for j in range(K) for d in (nxt[0], *res.variants[j % 2])],
               {"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1})


t_end = time.perf_counter() + 0.5
while time.perf_counter() < t_end:
    dev.submit(res.variants[0] * 8)
    dev.sync()
for name, build in (("params copy + pass per step", pass_per_step(True)), ("pass per step", pass_per_step(False)),
                    ("one pass (next_params per step)", one_pass)):
    print(f"{name:34s} {per_step_us(build):8.1f} us GPU per step", flush=True)
for rb in (8, 16, 32):
    be.resident_batch = rb
    for _ in range(2):
        t, n = time.perf_counter(), 0
        for toks, _ in be.decode_stream(plan, ctx, batch, 128):
            n += len(toks)
        print(f"resident batch {rb:3d}: decode_stream {1e6 * (time.perf_counter() - t) / n:8.1f} us wall per token",
              flush=True)
be.resident_batch = 8
t = time.perf_counter()
for b in range(16):
    be._submit(be._encode_batch(res, 63, 0, 8, b % 2, False))
t1 = time.perf_counter()
dev.sync()
print(f"host encode + submit {1e6 * (t1 - t) / 128:8.1f} us per step with the GPU busy; "
      f"{1e6 * (time.perf_counter() - t) / 128:8.1f} us per step until the GPU is idle")
