"""The kernel tuning tables (backends/wgpu/tuning.py): the configs each device class chooses for
representative shapes, pinned, so a table edit that moves a choice is seen (the rows reproduce the
choices the kernels were measured with; docs/perf-log.md, "Kernel tuning"). Pure choice functions: no
device needed. The shapes are those of real models' nodes (q/k/v, gate+up, down, LM heads)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from oxigpu.backends.wgpu.ops.attention import decode_config
from oxigpu.backends.wgpu.ops.attention_mma import MmaTile, mma_tile
from oxigpu.backends.wgpu.ops.attention_prefill import prefill_config
from oxigpu.backends.wgpu.ops.gemm import gemm_shader
from oxigpu.backends.wgpu.ops.matmul import TYPES, gemv_config, gemv_rows_split
from oxigpu.backends.wgpu.tuning import CPU, DEVICE_CLASSES, GPU, INF, MMA, TUNING, DeviceTraits, device_class
from oxigpu.errors import DeviceError

# a GPU with matrix units under Dawn (48 KiB of workgroup memory), the same GPU without them, lavapipe
DEVS = {MMA: DeviceTraits(has_mma=True), GPU: DeviceTraits(),
        CPU: DeviceTraits(is_software=True, int8_dots=False,
                          limits={"max-compute-workgroup-storage-size": 32768,
                                  "max-compute-invocations-per-workgroup": 1024,
                                  "max-storage-buffers-per-shader-stage": 32})}
GEMV_FIELDS = ("tpr", "r", "gpw", "piece", "ppb32", "u2", "q8x", "xq", "xs", "xclamp", "persist")
TILE_FIELDS = ("tm", "tn", "bk", "splits", "loaders", "q8", "nb", "mma", "sn", "fm")

# (type, k, n, int8 dots) -> GEMV_FIELDS
GEMV = {
    ('Q5_0', 896, 1152, True): (64, 1, 2, 'q5_0', 2, False, False, False, False, False, 0),
    ('Q5_0', 896, 9728, True): (32, 1, 4, 'q5_0', 4, False, True, False, True, False, 0),
    ('Q4_K', 4864, 896, True): (128, 1, 1, 'q4_k2', 2, True, False, False, False, False, 0),
    ('Q8_0', 896, 151936, True): (32, 1, 4, 'q8_0', 2, False, True, True, False, False, 0),
    ('Q6_K', 896, 151936, True): (32, 4, 4, 'q6_k', 1, True, True, False, False, False, 0),
    ('Q4_K', 2048, 3072, True): (32, 1, 8, 'q4_k2', 2, False, True, False, True, False, 0),
    ('Q4_K', 2048, 16384, True): (32, 8, 4, 'q4_k', 2, False, True, False, True, False, 0),
    ('Q6_K', 8192, 2048, True): (32, 1, 8, 'q6_k', 1, False, True, False, True, False, 0),
    ('Q6_K', 2048, 128256, True): (32, 4, 4, 'q6_k', 1, False, True, False, False, False, 0),
    ('Q4_K', 4096, 6144, True): (32, 2, 8, 'q4_k', 2, False, True, False, True, False, 0),
    ('Q4_K', 4096, 4096, True): (32, 1, 8, 'q4_k', 2, False, True, False, True, False, 0),
    ('Q4_K', 4096, 28672, True): (32, 8, 4, 'q4_k', 2, False, True, False, True, False, 528),
    ('Q4_K', 14336, 4096, True): (32, 2, 8, 'q4_k', 1, False, True, False, True, False, 0),
    ('Q6_K', 14336, 4096, True): (32, 2, 8, 'q6_k', 1, False, True, False, True, False, 0),
    ('Q8_0', 4096, 28672, True): (32, 4, 8, 'q8_0', 2, False, True, False, True, False, 0),
    ('Q4_0', 4096, 28672, True): (16, 4, 16, 'q4_0', 2, False, True, False, True, False, 0),
    ('Q8_0', 14336, 4096, True): (256, 4, 1, 'q8_0', 2, True, True, True, False, False, 0),
    ('Q4_0', 8192, 2048, True): (64, 1, 2, 'q4_0', 2, False, True, True, False, False, 0),
    ('Q8_0', 4096, 6144, True): (32, 2, 8, 'q8_0', 2, True, True, False, True, False, 0),
    ('Q4_K', 640, 2048, True): (64, 1, 2, 'q4_k2', 2, True, False, False, False, False, 0),
    ('Q8_0', 640, 262144, True): (32, 1, 4, 'q8_0', 2, False, True, True, False, False, 0),
    ('Q5_K', 4096, 4096, True): (32, 1, 8, 'q5_k', 2, False, True, False, True, False, 0),
    ('Q3_K', 4096, 4096, True): (64, 2, 2, 'q32', 2, False, True, False, False, False, 0),
    ('F16', 4096, 28672, True): (64, 4, 2, 'f16', 1, False, False, False, False, True, 0),
    ('F16', 2048, 2048, True): (128, 2, 1, 'f16', 1, False, False, False, False, True, 0),
    ('F16', 2048, 16384, True): (64, 4, 2, 'f16', 1, False, False, False, False, True, 0),
    ('F16', 4096, 128256, True): (256, 2, 1, 'f16', 1, False, False, False, False, True, 0),
    ('F16', 896, 896, True): (64, 1, 2, 'f16', 1, False, False, False, False, False, 0),
    ('F32', 640, 2560, True): (64, 1, 2, 'f32', 1, False, False, False, False, False, 0),
    ('BF16', 4096, 14336, True): (32, 1, 4, 'dq8', 1, False, False, False, False, False, 0),
    ('Q5_0', 896, 1152, False): (64, 1, 2, 'q5_0', 2, False, False, False, False, False, 0),
    ('Q5_0', 896, 9728, False): (32, 4, 4, 'q5_0', 2, False, False, False, False, False, 0),
    ('Q4_K', 4864, 896, False): (128, 1, 1, 'q4_k2', 2, True, False, False, False, False, 0),
    ('Q8_0', 896, 151936, False): (32, 4, 4, 'q8_0', 2, False, False, False, False, False, 0),
    ('Q6_K', 896, 151936, False): (32, 4, 4, 'q6_k', 2, False, False, False, False, False, 0),
    ('Q4_K', 2048, 3072, False): (64, 1, 2, 'q4_k2', 2, True, False, False, False, False, 0),
    ('Q4_K', 2048, 16384, False): (32, 4, 4, 'q4_k', 2, True, False, False, False, False, 0),
    ('Q6_K', 8192, 2048, False): (64, 1, 2, 'q6_k', 2, False, False, False, False, False, 0),
    ('Q6_K', 2048, 128256, False): (32, 4, 4, 'q6_k', 2, False, False, False, False, False, 0),
    ('Q4_K', 4096, 6144, False): (32, 2, 4, 'q4_k', 2, False, False, False, False, False, 0),
    ('Q4_K', 4096, 4096, False): (32, 2, 4, 'q4_k', 2, False, False, False, False, False, 0),
    ('Q4_K', 4096, 28672, False): (32, 4, 4, 'q4_k', 2, True, False, False, False, False, 0),
    ('Q4_K', 14336, 4096, False): (64, 4, 2, 'q4_k', 2, False, False, False, False, False, 0),
    ('Q6_K', 14336, 4096, False): (64, 2, 2, 'q6_k', 2, False, False, False, False, False, 0),
    ('Q8_0', 4096, 28672, False): (32, 4, 4, 'q8_0', 2, False, False, False, False, False, 0),
    ('Q4_0', 4096, 28672, False): (32, 4, 4, 'q4_0', 2, False, False, False, False, False, 0),
    ('Q8_0', 14336, 4096, False): (64, 2, 2, 'q8_0', 2, False, False, False, False, False, 0),
    ('Q8_0', 4096, 6144, False): (64, 2, 2, 'q8_0', 2, False, False, False, False, False, 0),
    ('Q4_K', 640, 2048, False): (64, 1, 2, 'q4_k2', 2, True, False, False, False, False, 0),
    ('Q8_0', 640, 262144, False): (32, 4, 4, 'q8_0', 2, False, False, False, False, False, 0),
    ('Q5_K', 4096, 4096, False): (64, 2, 2, 'q5_k', 2, False, False, False, False, False, 0),
    ('Q3_K', 4096, 4096, False): (64, 2, 2, 'dq8', 2, False, False, False, False, False, 0),
    ('F16', 4096, 28672, False): (64, 4, 2, 'f16', 1, False, False, False, False, True, 0),
    ('F16', 2048, 2048, False): (128, 2, 1, 'f16', 1, False, False, False, False, True, 0),
    ('F16', 896, 896, False): (64, 1, 2, 'f16', 1, False, False, False, False, False, 0),
    ('F32', 640, 2560, False): (64, 1, 2, 'f32', 1, False, False, False, False, False, 0),
    ('BF16', 4096, 14336, False): (32, 1, 4, 'dq8', 1, False, False, False, False, False, 0),
}
# (class, m, type, n, k, glu) -> (shader, TILE_FIELDS or None)
GEMM = {
    ('mma', 512, 'Q4_K', 28672, 4096, True): ('gemm_mma.wgsl', (8, 8, 64, 1, 256, False, 1, True, 4, 2)),
    ('mma', 512, 'Q4_K', 6144, 4096, False): ('gemm_mma.wgsl', (8, 8, 64, 2, 256, False, 1, True, 4, 2)),
    ('mma', 512, 'Q6_K', 4096, 14336, False): ('gemm_mma.wgsl', (8, 8, 64, 1, 256, False, 1, True, 4, 2)),
    ('mma', 512, 'F16', 6144, 4096, False): ('gemm_mma.wgsl', (8, 8, 64, 2, 256, False, 1, True, 4, 2)),
    ('mma', 512, 'Q5_0', 1152, 896, False): ('gemm_mma.wgsl', (8, 8, 64, 3, 256, False, 1, True, 4, 2)),
    ('mma', 512, 'Q4_K', 896, 4864, False): ('gemm_mma.wgsl', (8, 8, 64, 4, 256, False, 1, True, 4, 2)),
    ('mma', 512, 'Q8_0', 2048, 2048, False): ('gemm_mma.wgsl', (8, 8, 64, 2, 256, False, 1, True, 4, 2)),
    ('mma', 64, 'Q4_K', 2048, 2048, False): ('gemm_mma.wgsl', (4, 4, 64, 4, 256, False, 1, True, 2, 2)),
    ('mma', 33, 'Q6_K', 4096, 4096, False): ('gemm_mma.wgsl', (4, 4, 64, 4, 256, False, 1, True, 2, 2)),
    ('mma', 17, 'Q4_K', 2048, 2048, False): ('gemm_mma.wgsl', (4, 4, 64, 4, 256, False, 1, True, 2, 2)),
    ('mma', 32, 'Q4_K', 28672, 4096, True): ('gemm_mma.wgsl', (2, 4, 64, 4, 256, False, 1, True, 2, 2)),
    ('mma', 32, 'Q4_K', 6144, 4096, False): ('gemm_mma.wgsl', (4, 4, 64, 8, 256, False, 1, True, 2, 2)),
    ('mma', 32, 'Q6_K', 4096, 14336, False): ('gemm_mma.wgsl', (4, 4, 64, 4, 256, False, 1, True, 2, 2)),
    ('gpu', 32, 'Q4_K', 6144, 4096, False): ('gemm_q.wgsl', None),
    ('mma', 2, 'Q4_K', 4096, 4096, False): ('gemm_q.wgsl', None),
    ('mma', 512, 'Q2_K', 4096, 4096, False): ('gemm_mma.wgsl', (8, 8, 64, 1, 256, False, 1, True, 4, 2)),
    ('gpu', 512, 'Q4_K', 28672, 4096, True): ('error', None),
    ('gpu', 512, 'Q4_K', 6144, 4096, False): ('gemm_q8.wgsl', (8, 8, 16, 2, 128, True, 2, False, 2, 2)),
    ('gpu', 512, 'Q6_K', 4096, 14336, False): ('gemm_q8.wgsl', (8, 8, 16, 1, 128, True, 2, False, 2, 2)),
    ('gpu', 512, 'F16', 6144, 4096, False): ('gemm_tiled.wgsl', (8, 8, 16, 2, 256, False, 1, False, 2, 2)),
    ('gpu', 512, 'Q5_0', 1152, 896, False): ('gemm_q8.wgsl', (8, 8, 16, 3, 128, True, 2, False, 2, 2)),
    ('gpu', 512, 'Q4_K', 896, 4864, False): ('gemm_q8.wgsl', (8, 8, 16, 4, 128, True, 2, False, 2, 2)),
    ('gpu', 512, 'Q8_0', 2048, 2048, False): ('gemm_q8.wgsl', (8, 8, 16, 2, 128, True, 2, False, 2, 2)),
    ('gpu', 64, 'Q4_K', 2048, 2048, False): ('gemm_q8.wgsl', (4, 4, 16, 4, 256, True, 2, False, 2, 2)),
    ('gpu', 33, 'Q6_K', 4096, 4096, False): ('gemm_q8.wgsl', (4, 8, 16, 4, 128, True, 2, False, 2, 2)),
    ('gpu', 17, 'Q4_K', 2048, 2048, False): ('gemm_q.wgsl', None),
    ('gpu', 2, 'Q4_K', 4096, 4096, False): ('gemm_q.wgsl', None),
    ('gpu', 512, 'Q2_K', 4096, 4096, False): ('gemm_tiled.wgsl', (8, 8, 16, 1, 256, False, 1, False, 2, 2)),
    ('cpu', 512, 'Q4_K', 28672, 4096, True): ('error', None),
    ('cpu', 512, 'Q4_K', 6144, 4096, False): ('gemm_tiled.wgsl', (8, 8, 16, 2, 256, False, 1, False, 2, 2)),
    ('cpu', 512, 'Q6_K', 4096, 14336, False): ('gemm_tiled.wgsl', (8, 8, 16, 1, 256, False, 1, False, 2, 2)),
    ('cpu', 512, 'F16', 6144, 4096, False): ('gemm_tiled.wgsl', (8, 8, 16, 2, 256, False, 1, False, 2, 2)),
    ('cpu', 512, 'Q5_0', 1152, 896, False): ('gemm_tiled.wgsl', (8, 8, 16, 3, 256, False, 1, False, 2, 2)),
    ('cpu', 512, 'Q4_K', 896, 4864, False): ('gemm_tiled.wgsl', (8, 8, 16, 4, 256, False, 1, False, 2, 2)),
    ('cpu', 512, 'Q8_0', 2048, 2048, False): ('gemm_tiled.wgsl', (8, 8, 16, 2, 256, False, 1, False, 2, 2)),
    ('cpu', 64, 'Q4_K', 2048, 2048, False): ('gemm_tiled.wgsl', (4, 4, 16, 4, 256, False, 1, False, 2, 2)),
    ('cpu', 33, 'Q6_K', 4096, 4096, False): ('gemm_tiled.wgsl', (4, 8, 16, 4, 256, False, 1, False, 2, 2)),
    ('cpu', 17, 'Q4_K', 2048, 2048, False): ('gemm_q.wgsl', None),
    ('cpu', 2, 'Q4_K', 4096, 4096, False): ('gemm_q.wgsl', None),
    ('cpu', 512, 'Q2_K', 4096, 4096, False): ('gemm_tiled.wgsl', (8, 8, 16, 1, 256, False, 1, False, 2, 2)),
}
# decode_config(d, dv, g, t, n_kv_head, n_ctx) -> DecodeConfig fields
DECODE = {
    (64, 64, 7, 1, 2, 4096): (4, 2, 16, 4, 8, 1, 1, 32, 32, 1, False),
    (64, 64, 4, 1, 8, 4096): (4, 1, 16, 4, 8, 1, 1, 32, 32, 1, False),
    (128, 128, 4, 1, 8, 4096): (2, 2, 32, 4, 8, 1, 1, 16, 32, 1, False),
    (128, 128, 4, 1, 8, 131072): (4, 1, 32, 2, 8, 1, 1, 33, 16, 1, True),     # the long-context shape
    (256, 256, 4, 1, 1, 32768): (2, 2, 32, 4, 4, 2, 2, 132, 16, 1, False),
    (64, 64, 7, 16, 2, 4096): (4, 28, 16, 4, 8, 1, 1, 4, 32, 1, True),
}
# prefill_config(d, dv, limit, override, rows, n_kv_head) -> tile
PREFILL = {
    (64, 64, 49152, None, 3584, 2): '16:2:4',
    (64, 64, 49152, None, 2048, 8): '16:4:4',
    (128, 128, 49152, None, 2048, 8): '16:2:4s',
    (256, 256, 49152, None, 2048, 1): '16:1:2s',
    (64, 64, 32768, None, 3584, 2): '16:2:4',
    (64, 64, 16384, None, 3584, 2): '16:1:2',
}


def test_device_classes():
    assert [device_class(DEVS[c]) for c in DEVICE_CLASSES] == list(DEVICE_CLASSES)
    assert set(TUNING) == set(DEVICE_CLASSES)


@pytest.mark.parametrize("cls", DEVICE_CLASSES)
def test_gemv_pins(cls):
    int8 = DEVS[cls].int8_dots
    for (t, k, n, i8), want in GEMV.items():
        got = gemv_config(t, k, n, i8, cls)
        assert tuple(getattr(got, f) for f in GEMV_FIELDS) == want, (cls, t, k, n, i8)
    # the class's own default: integer dots on hardware GPUs only
    assert gemv_config("Q4_K", 4096, 28672, int8, cls).q8x is (cls != CPU)


# several rows as one GEMV: (type, k, n, rows, glu) -> (tpr, r, gpw, u2, q8x, xq, xs, persist), x rows per group
GEMV_ROWS = {
    ("Q4_K", 4096, 28672, 4, True): ((32, 4, 4, False, True, True, False, 0), 4),
    ("Q4_K", 4096, 28672, 16, True): ((32, 4, 4, False, True, True, False, 0), 4),
    ("Q4_K", 4096, 6144, 2, False): ((32, 4, 8, False, True, True, False, 0), 2),
    ("Q4_K", 4096, 6144, 8, False): ((32, 4, 8, False, True, True, False, 0), 4),
    ("Q6_K", 14336, 4096, 4, False): ((32, 4, 8, False, True, True, False, 0), 4),
    ("Q6_K", 14336, 4096, 16, False): ((32, 4, 8, False, True, True, False, 0), 4),
    ("Q4_K", 2048, 2560, 16, False): ((32, 4, 8, False, True, True, False, 0), 4),
    ("F16", 4096, 4096, 2, False): ((128, 2, 1, False, False, False, False, 0), 2),
    # the LM head: 4 weight rows a group with two-piece steps too (gemv_wide_rows)
    ("Q6_K", 4096, 128256, 16, False): ((32, 4, 4, False, True, True, False, 0), 4),
    ("Q6_K", 2048, 128256, 4, False): ((32, 4, 4, False, True, True, False, 0), 4),
}


def test_gemv_rows_pins():
    """The one-row split's lanes, pieces and steps; on integer dots 4 x rows and 4 weight rows per group (2
    with two-piece steps past 4 rows, but on vocabulary-sized weights), floats within 8 sums; x quantized
    once by the dispatch; matmuls of up to 16 rows are GEMVs on every class."""
    for (t, k, n, m, glu), (want, xr) in GEMV_ROWS.items():
        one = gemv_config(t, k, n)
        cfg, got_xr = gemv_rows_split(one, m, glu, TUNING[MMA].gemv_acc, TUNING[MMA], n)
        assert (cfg.tpr, cfg.r, cfg.gpw, cfg.u2, cfg.q8x, cfg.xq, cfg.xs, cfg.persist) == want and got_xr == xr
        assert (cfg.tpr, cfg.u2, cfg.piece, cfg.ppb32, cfg.q8x) == (one.tpr, one.u2, one.piece, one.ppb32, one.q8x)
    assert all(t.gemv_rows == 16 for t in TUNING.values())


@pytest.mark.parametrize("cls", DEVICE_CLASSES)
def test_gemm_pins(cls):
    for (c, m, t, n, k, glu), (shader, tile) in GEMM.items():
        if c != cls:
            continue
        if shader == "error":
            with pytest.raises(DeviceError, match="GLU epilogue"):
                gemm_shader(DEVS[cls], m, t, n, None, k, glu)
            continue
        got, _, cfg = gemm_shader(DEVS[cls], m, t, n, None, k, glu)
        assert (got, tuple(getattr(cfg, f) for f in TILE_FIELDS) if cfg else None) == (shader, tile), (m, t, n, k)


@pytest.mark.parametrize("cls", DEVICE_CLASSES)
def test_attention_pins(cls):
    for args, want in DECODE.items():
        assert tuple(decode_config(*args, device=cls).__dict__.values()) == want, args
    for args, want in PREFILL.items():
        cfg = prefill_config(*args, device=cls)
        assert (cfg.spec if cfg else None) == want, args
    assert mma_tile(128, 128, 49152, device=cls) == MmaTile(4, 32) and mma_tile(256, 256, 49152, device=cls) is None


def test_every_table_is_total():
    """Each GEMV table's last row matches any weight type and shape: no shape falls through."""
    for t in TUNING.values():
        last = t.gemv[-1]
        assert last.types is None and last.k == (0, INF) and last.n == (0, INF) and not last.int8
    for t in TYPES:
        for k, n in ((8, 1), (1 << 20, 1 << 20), (640, 262144)):
            gemv_config(t, k, n)



def test_no_model_or_gpu_names_in_kernel_code():
    """Kernel code says why in shape terms; model names, one GPU's name and measurement histories live in
    docs/perf-log.md (issue 22)."""
    root = Path(__file__).resolve().parents[1] / "oxigpu"
    files = [*(root / "backends" / "wgpu").rglob("*.py"), *(root / "shaders").rglob("*.wgsl")]
    bad = re.compile(r"H100|H200|\b8B\b|gemma3's|Llama-3|Qwen2\.5|BENCHMARKS\.md")
    found = [f"{f.relative_to(root)}:{i}" for f in files if f.name not in ("backend.py", "sample.py", "sample.wgsl")
             for i, line in enumerate(f.read_text().splitlines(), 1) if bad.search(line)]
    assert not found, found
