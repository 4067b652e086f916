"""A prefill chunk's submits on the GPU's clock: each piece (Device.submit) recorded with timestamps at both
ends of its pass, and the host's clock at each submit and at the logits read, over evals of NP tokens
into an empty cache. Where the wall time of a chunk goes beyond its GPU work: the GPU's start after the
eval begins, its idle gaps between pieces, and the read after its end. Runs on the ce6912e tree too (the
same Device.encode), so two trees compare in one call (docs/perf-log.md, fourth session). Each chunk's
first piece is encoded in place here (the backend encodes it ahead, while the chunk before runs).

    PYTHONPATH=<tree> python3 dev/probe_pp_gpu.py MODEL.gguf REPS"""
import statistics as st
import sys
import time

import numpy as np

from oxigpu.backends.wgpu import device as D
from oxigpu.runtime.engine import Engine

NP = 512
F, reps = sys.argv[1], int(sys.argv[2])
e = Engine(F, backend="wgpu", n_ctx=NP + 128, prefill_chunk=NP)
dev = e.backend.dev
wgpu = dev._wgpu
QS = dev.device.create_query_set(type="timestamp", count=64)
RES = dev.device.create_buffer(size=8 * 64, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
host: list[float] = []
sizes: list[int] = []


def submit(self, ds):
    i = 2 * len(sizes)
    enc = self.device.create_command_encoder()
    self.encode(enc, ds, {"query_set": QS, "beginning_of_pass_write_index": i, "end_of_pass_write_index": i + 1})
    self.queue.submit([enc.finish()])
    host.append(time.perf_counter())
    sizes.append(len(ds))


real_read = D.Device.read


def read(self, *a, **k):
    host.append(time.perf_counter())       # the read starts
    r = real_read(self, *a, **k)
    host.append(time.perf_counter())       # and returns (the GPU is done)
    return r


D.Device.submit, D.Device.read = submit, read
# every piece through submit() above, with its timestamps: no first piece encoded ahead (Device.prepare)
D.Device.prepare = lambda self, ds: None
rows = []
for r in range(reps + 1):
    if hasattr(e, "forget"):
        e.forget()
    ids = np.random.default_rng(r).integers(0, e.vocab_size, NP).tolist()
    host.clear()
    sizes.clear()
    t0 = time.perf_counter()
    e.eval(ids)
    wall = time.perf_counter() - t0
    n = len(sizes)
    enc = dev.device.create_command_encoder()
    enc.resolve_query_set(QS, 0, 2 * n, RES, 0)
    dev.queue.submit([enc.finish()])
    t = np.frombuffer(dev.queue.read_buffer(RES, 0, 16 * n), np.uint64).astype(np.int64) * 1e-6   # ms
    busy = t[1::2] - t[0::2]
    gaps = t[2::2] - t[1:-1:2]
    if r:       # the first eval warms up
        rows.append((wall * 1e3, (host[0] - t0) * 1e3, (host[n - 1] - t0) * 1e3, (host[n + 1] - host[n]) * 1e3,
                     busy.sum(), gaps.sum(), t[-1] - t[0]))
    if r == reps:
        print("pieces", sizes, "busy ms", np.round(busy, 3).tolist(), "gaps ms", np.round(gaps, 3).tolist())
names = ("wall", "first submit", "last submit", "read", "GPU busy", "GPU gaps", "GPU first..last")
print(" | ".join(f"{k} {st.median(c):.3f}" for k, c in zip(names, zip(*rows))), "(ms, medians of", len(rows), "evals)")
