"""Every WGSL pipeline the engine builds also passes Tint, the WGSL compiler of Dawn (the implementation the
engine runs on where wgpudawn finds a hardware GPU), not only wgpu-native's naga, which the rest of the
suite runs on lavapipe. Tint is stricter: ``enable`` directives, uniformity analysis. The sources are
recorded while the tiny models of every architecture prefill (tiled GEMMs) and decode, with float and
integer dots, and while the GEMVs of 8B-sized weights build (their staged-x and multi-row splits); they
are compiled, as Device.shader_source writes them for Dawn, by Dawn's Null backend in a subprocess (its
WGSL front end and validation; nothing executes). The matrix-unit GEMM (gemm_mma.wgsl) needs an adapter
with subgroup matrices, which the Null backend lacks: tests/test_kernel_gemm.py checks it on the H100.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("wgpudawn")
pytestmark = [pytest.mark.gpu, pytest.mark.slow]

COMPILE = r"""
import glob, json, os, sys
import wgpudawn
ad = wgpudawn.gpu.request_adapter_sync()
assert ad.info["backend_type"] == "Null", ad.info
dev = ad.request_device_sync(required_features=[f for f in ("shader-f16", "subgroups") if f in ad.features])
bad = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.wgsl"))):
    try:
        dev.create_shader_module(code=open(p).read())
    except Exception as e:
        bad[os.path.basename(p)] = " ".join(str(e).split())[:1500]
print(json.dumps(bad))
"""


def _tint_errors(srcdir) -> dict[str, str]:
    env = {**os.environ, "WGPU_BACKEND_TYPE": "Null"}
    out = subprocess.run([sys.executable, "-c", COMPILE, str(srcdir)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_pipeline_passes_tint(dev, tiny_models, tmp_path, monkeypatch):
    from oxigpu import LLM
    from oxigpu.backends.wgpu import device as devmod
    from oxigpu.backends.wgpu.kernel import run_op
    from oxigpu.backends.wgpu.ops.matmul import matmul_case, matmul_glu_checks

    sources: dict[str, str] = {}
    build = devmod.Device.pipeline

    def record(self, file, entry="main", defines=None):
        src = self.shader_source(file, defines, implementation="dawn")
        sources.setdefault(src, f"{len(sources):03d}-{file.replace('/', '_')}")
        return build(self, file, entry, defines)

    monkeypatch.setattr(devmod.Device, "pipeline", record)
    prompt = "The quick brown fox jumps over the lazy dog, " * 4          # > 32 tokens: the tiled GEMMs
    for int8 in ("0", "1"):
        monkeypatch.setenv("OXIGPU_INT8_DOTS", int8)
        for _, path in sorted(tiny_models.items()):
            llm = LLM(path, backend="wgpu", n_ctx=160)
            if llm.is_embedding_model:      # encoders: their own ops, one step per text
                llm.embed([prompt, "short"])
            else:
                llm.generate(prompt, max_tokens=3, temperature=0.0)
        for t in ("Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q5_0", "F16"):
            for k, n in ((4096, 14336), (14336, 4096)):
                c = matmul_case(t, 1, k, n, bias=False, seed=1, distinct_rows=64)
                assert np.isfinite(run_op(c.op, c.inputs, in_types=c.in_types, dev=dev)[0]).all()
    glu = matmul_glu_checks()[2]          # workgroups taking rows in turn (persist): barriers in a loop
    gv = {"q8x": True, "xs": True, "persist": 2, "piece": "q4_k"}
    assert np.isfinite(run_op(glu.op, glu.inputs, {**glu.attrs, "gemv": gv}, in_types=glu.in_types, dev=dev)[0]).all()
    assert len(sources) > 40
    for src, name in sources.items():
        (tmp_path / f"{name}.wgsl").write_text(src)
    assert _tint_errors(tmp_path) == {}


def test_every_check_pipeline_passes_tint(dev, tmp_path):
    """The pipelines of every registered kernel check (oxigpu kernels), as Dawn would get them: the paged
    kernels of batched steps and the multi-row GEMVs that no tiny model's plan builds yet among them."""
    from oxigpu.backends.wgpu.kernel import kernel_sources

    srcs = kernel_sources("*", dev, implementation="dawn")
    assert len(srcs) > 100 and any(s.defines.get("PAGED") for s in srcs) and any(s.defines.get("MULTI") for s in srcs)
    for i, s in enumerate(srcs):
        (tmp_path / f"{i:03d}-{s.file.replace('/', '_')}.wgsl").write_text(s.source)
    assert _tint_errors(tmp_path) == {}


def _stub_matrix_calls(src: str) -> str:
    """gemm_mmv.wgsl's subgroup-matrix calls as plain f32 arithmetic of the same operands (the Null adapter
    has no subgroup matrices): the rest of the kernel, its buffer views and uniformity, stays as Tint gets it.
    Fails where a call is left (a rewritten call site needs its pattern here)."""
    src = src.replace("enable chromium_experimental_subgroup_matrix;", "")
    src = src.replace("diagnostic(off, chromium.subgroup_matrix_uniformity);", "")
    src = src.replace("subgroup_matrix_result<f32, 16, 16>", "f32")
    src = re.sub(r"subgroupMatrixLoad<subgroup_matrix_(?:left|right)<f16, 16, 16>>\((bufferView<array<f16, SMH>>"
                 r"\(&sm, 0\)),\s*([^,]+),\s*(?:true|false),\s*(\w+)\)", r"f32((*\1)[\2 + \3])", src)
    src = src.replace("subgroupMatrixMultiplyAccumulate(a, b, c)", "c + a * b")
    src = re.sub(r"subgroupMatrixStore\((bufferView<array<f32, SMH / 2u>>\(&sm, 0\)), ([^,]+), c, false, 16u\);",
                 r"(*\1)[\2] = c;", src)
    assert "subgroup_matrix" not in src and "subgroupMatrix" not in src
    return src


def test_mmv_passes_tint_but_its_matrix_calls(dev, tmp_path):
    """gemm_mmv.wgsl (the decode batches' matrix-unit GEMM, which only a GPU with subgroup matrices builds)
    for every form: x from f32 or from the x pass, both loaders, unsplit and split (the last workgroup's
    sum), plain and GLU; its matrix calls stubbed (``_stub_matrix_calls``)."""
    from oxigpu.backends.wgpu.ops.gemm import gemm_shader
    from oxigpu.backends.wgpu.tuning import DeviceTraits

    i = 0
    for xsrc, wload, splits, glu in itertools.product(("f16", "f32"), ("q4_k", "q6_k"), (1, 3), (False, True)):
        shader, chosen, _ = gemm_shader(DeviceTraits(has_mma=True), 16, wload.upper(), 4096,
                                        {"mmv": True, "mmv_splits": splits}, 4096, glu=glu)
        assert shader == "gemm_mmv.wgsl"
        defines = {"GLU": glu, "ACT": "silu", "HAS_BIAS": True, "HAS_RES": not glu, "NSEG": 1 if glu else 2,
                   **chosen, "XSRC": xsrc}
        src = dev.shader_source("gemm_mmv.wgsl", defines, implementation="dawn")
        (tmp_path / f"{i:02d}-gemm_mmv-{xsrc}-{wload}-s{splits}-glu{int(glu)}.wgsl").write_text(
            _stub_matrix_calls(src))
        i += 1
    (tmp_path / "zz-bad.wgsl").write_text(_stub_matrix_calls(src).replace("let nst = ", "let nst = undefined_name + "))
    errors = _tint_errors(tmp_path)
    assert list(errors) == ["zz-bad.wgsl"]


def test_tint_check_can_fail(tmp_path):
    """The subprocess reports a source Tint rejects (naga accepts this one: a subgroup builtin with no
    `enable subgroups;`)."""
    (tmp_path / "bad.wgsl").write_text("fn f(x: f32) -> f32 { return subgroupAdd(x); }\n")
    (tmp_path / "good.wgsl").write_text("fn g(x: f32) -> f32 { return x; }\n")
    errors = _tint_errors(tmp_path)
    assert list(errors) == ["bad.wgsl"] and "subgroups" in errors["bad.wgsl"]


def test_every_quant_type_passes_tint(dev, tmp_path, monkeypatch):
    """Every weight type's kernels, as Dawn would build them: the GEMV (float dots, and integer dots where
    the type has an integer piece), the short GEMM, the tiled one (float and integer dots), the embedding
    gather, the experts' GEMV and grouped GEMM (matmul_id) and add_rows; the kernels are only constructed
    (their pipelines recorded, nothing compiled here)."""
    from oxigpu.backends.wgpu.kernel import KERNELS, load_kernels, logical_shape
    from oxigpu.backends.wgpu.ops.embed import table_case
    from oxigpu.backends.wgpu.ops.gemm import Q8_TYPES
    from oxigpu.backends.wgpu.ops.matmul import TYPES, matmul_case
    from oxigpu.backends.wgpu.ops.quant_checks import gemv_piece

    load_kernels()
    cases = []
    for t in TYPES:
        k = 1024 if t not in ("F32", "F16", "BF16") else 640
        cases += [(matmul_case(t, 1, k, 67, bias=True), {}), (matmul_case(t, 3, k, 67, bias=False), {}),
                  (matmul_case(t, 40, k, 67, bias=False), {"gemm": {"q8": False, "mma": False}}),
                  (table_case(t, 7, k, 4, 4, seed=0), {})]
        piece = gemv_piece(t)
        if piece:
            cases.append((matmul_case(t, 1, k, 67, bias=True), {"gemv": {"q8x": True, "piece": piece, "ppb32": 2}}))
        if t in Q8_TYPES:
            cases.append((matmul_case(t, 40, k, 67, bias=False), {"gemm": {"q8": True, "mma": False}}))
    builds = [(c.op, [logical_shape(np.asarray(a), ty) for a, ty in zip(c.inputs, c.in_types)], c.in_types,
               {**c.attrs, **attrs}, c.name.split()[0]) for c, attrs in cases]
    for t in TYPES:       # experts of 256 elements: one token (per-pair GEMV), six (grouped GEMM); add_rows
        builds += [("matmul_id", [(T, 256), (4, 24, 256), (T, 2)], ["f32", t, "i32"], {}, t) for T in (1, 6)]
        builds.append(("add_rows", [(4, 256), (8, 256)], ["f32", t], {"row": 1}, t))
    # experts on integer dots (the GEMV's staged and dispatched x, the grouped GEMM's gemm_q8), at a
    # qwen3moe-like width (128 experts of 768 rows, 8 a token) and small
    i8 = [("matmul_id", [(T, k), (128, n, k), (T, 8)], ["f32", t, "i32"], {}, f"{t}-int8")
          for t in ("Q4_K", "Q6_K") for T in (1, 4, 64) for k, n in ((2048, 768), (768, 2048))]
    i8 += [("matmul_id", [(6, 256), (4, 24, 256), (6, 2)], ["f32", t, "i32"], {}, f"{t}-int8") for t in Q8_TYPES]
    # the experts' gate+up GEMV with the GLU epilogue (64 experts: both within one binding here) and the
    # moe_sum_add pass, float and integer dots
    i8 += [("matmul_id_glu", [(1, 2048), (64, 768, 2048), (64, 768, 2048), (1, 8)], ["f32", "Q4_K", "Q4_K", "i32"],
            {"act": "silu"}, f"glu{sfx}") for sfx in ("", "-int8")]
    i8.append(("moe_sum_add", [(4, 8 * 64), (4, 8), (4, 64)], ["f32"] * 3, {}, "moe"))
    sources: dict[str, str] = {}
    for op, shapes, types, attrs, label in builds + i8:
        cls = KERNELS[op]
        monkeypatch.setenv("OXIGPU_INT8_DOTS", "1" if label.endswith("-int8") else "0")
        with dev.recording() as rec:
            cls(dev, attrs, shapes, types, cls.output_shapes(shapes, attrs))
        for file, _, defines in rec:
            src = dev.shader_source(file, defines, implementation="dawn")
            sources.setdefault(src, f"{len(sources):03d}-{file.replace('/', '_')}-{label}")
    assert len(sources) > 3 * len(TYPES)
    for src, name in sources.items():
        (tmp_path / f"{name}.wgsl").write_text(src)
    assert _tint_errors(tmp_path) == {}


def matrix_stand_ins(src: str) -> str:
    """A gemm_mma.wgsl source (Dawn's) with its subgroup-matrix types and calls replaced by f32 stand-ins
    of the same arguments, which Dawn's Null backend (no subgroup matrices) compiles: everything else of
    the kernel (loaders, index arithmetic, epilogues, uniformity) meets Tint."""
    import re
    src = src.replace("enable chromium_experimental_subgroup_matrix;", "")
    src = src.replace("diagnostic(off, chromium.subgroup_matrix_uniformity);", "")
    src = re.sub(r"subgroupMatrixLoad<subgroup_matrix_(left|right)<f16, 16, 16>>\(&(\w+), ", r"sml_\2(", src)
    src = re.sub(r"subgroup_matrix_\w+<f\d+, 16, 16>", "f32", src)
    src = src.replace("subgroupMatrixMultiplyAccumulate(", "smma(").replace("subgroupMatrixStore(&cs, ", "sms(")
    assert "subgroup_matrix" not in src and "subgroupMatrix" not in src
    return src + """
fn sml_xs(o: u32, t: bool, s: u32) -> f32 { return f32(xs[o]); }
fn sml_ws(o: u32, t: bool, s: u32) -> f32 { return f32(ws[o]); }
fn smma(a: f32, b: f32, c: f32) -> f32 { return a * b + c; }
fn sms(o: u32, c: f32, t: bool, s: u32) { cs[o] = c; }
"""


def test_mma_gemm_passes_tint_with_matrix_stand_ins(dev, tmp_path, monkeypatch):
    """The matrix-unit GEMM as gemm_shader sets it up on an adapter with subgroup matrices, for every weight
    loader (f16, q32, q32r, q32r16, dq8, the f16-arithmetic K-quant ones) and GLU / split-k / decode-batch shapes, with
    the matrix calls stood in (:func:`matrix_stand_ins`); its split-k reduction (GLU pairs there) as is.
    The matrix calls themselves are checked on the GPU (tests/test_kernel_gemm.py)."""
    from oxigpu.backends.wgpu.ops.gemm import gemm_shader
    from oxigpu.backends.wgpu.tuning import DeviceTraits

    mma = DeviceTraits(has_mma=True)
    cases = [(m, t, n, k, glu, over) for t in ("Q4_K", "Q6_K", "F16", "Q2_K", "Q8_0", "Q5_0", "IQ4_NL")
             for m, n, k, glu, over in ((512, 28672, 4096, True, None), (512, 4096, 14336, False, None),
                                        (40, 28672, 4096, True, None), (40, 4096, 14336, False, {"half": True}),
                                        (64, 6144, 4096, True, {"mma": True, "tm": 4, "tn": 4, "sn": 2, "splits": 4,
                                                                "half": True}))]
    # weights staged transposed (TileConfig.wt: the loaders of 32-weight units), plain and GLU
    cases += [(512, t, n, 4096, glu, {"mma": True, "wt": True}) for t in ("Q4_K", "Q6_K", "Q8_0", "IQ4_NL")
              for n, glu in ((4096, False), (28672, True))]
    # the 32-weight units as 16-byte words (the default) and as 32-bit ones
    cases += [(512, t, 4096, 4096, False, {"mma": True, "raw16": r16}) for t in ("Q8_0", "Q5_0", "Q4_0")
              for r16 in (True, False)]
    n_src = 0
    for m, t, n, k, glu, over in cases:
        shader, extra, cfg = gemm_shader(mma, m, t, n, over, k, glu=glu)
        assert shader == "gemm_mma.wgsl"
        defines = {"QUANT": t.lower(), "HAS_BIAS": False, "HAS_RES": False, "NSEG": 1, "GLU": glu, "ACT": "silu",
                   "ID": False, **extra}
        src = matrix_stand_ins(dev.shader_source(shader, defines, implementation="dawn"))
        (tmp_path / f"{n_src:02d}-{t}-{extra['WLOAD']}-{m}{'-wt' * extra['WT']}.wgsl").write_text(src)
        n_src += 1
        if cfg.splits > 1:
            red = dev.shader_source("gemm_reduce.wgsl", {**defines, "SPLITS": cfg.splits}, implementation="dawn")
            (tmp_path / f"{n_src:02d}-reduce.wgsl").write_text(red)
            n_src += 1
    loaders = {p.name.split("-")[2] for p in tmp_path.iterdir() if "reduce" not in p.name}
    assert {"q4_kh", "q6_kh", "q32", "q32r", "q32r16", "f16", "dq8"} <= loaders
    assert sum(p.name.endswith("-wt.wgsl") for p in tmp_path.iterdir()) == 8
    assert _tint_errors(tmp_path) == {}


def attention_stand_ins(src: str) -> str:
    """An attention_mma.wgsl source (Dawn's) with its subgroup-matrix types and calls replaced by f32
    stand-ins of the same arguments (as :func:`matrix_stand_ins` for the GEMM)."""
    import re
    src = src.replace("enable chromium_experimental_subgroup_matrix;", "")
    src = src.replace("diagnostic(off, chromium.subgroup_matrix_uniformity);", "")
    src = re.sub(r"subgroupMatrixLoad<subgroup_matrix_\w+<f\d+, 16, 16>>\(&(\w+), ", r"sml_\1(", src)
    src = re.sub(r"subgroupMatrixStore\(&(\w+), ", r"sms_\1(", src)
    src = src.replace("subgroupMatrixMultiplyAccumulate(", "smma(").replace("subgroupMatrixMultiply<f32>(", "smm(")
    src = re.sub(r"subgroup_matrix_\w+<f\d+, 16, 16>", "f32", src)
    assert "subgroup_matrix" not in src and "subgroupMatrix" not in src
    return src + """
fn sml_kv(o: u32, t: bool, s: u32) -> f32 { return f32(kv[o]); }
fn sml_ps(o: u32, t: bool, s: u32) -> f32 { return f32(ps[o]); }
fn sml_ss(o: u32, t: bool, s: u32) -> f32 { return ss[o]; }
fn smma(a: f32, b: f32, c: f32) -> f32 { return a * b + c; }
fn smm(a: f32, b: f32) -> f32 { return a * b; }
fn sms_ss(o: u32, c: f32, t: bool, s: u32) { ss[o] = c; }
"""


def test_mma_attention_passes_tint_with_matrix_stand_ins(dev, tmp_path, monkeypatch):
    """The matrix-unit prefill attention as Attention sets it up on an adapter with subgroup matrices:
    contiguous and paged, one sequence and tiles of several, key units (fixed, from the step's keys) and
    their merge, the word staging, a quantized cache, 64- and 128-dim heads; matrix calls stood in. The
    kernel itself runs on the GPU (tests/test_kernel_attention.py)."""
    from oxigpu.backends.wgpu.device import Device
    from oxigpu.backends.wgpu.ops._common import Batch
    from oxigpu.backends.wgpu.ops.attention import Attention, attention_case, paged_attention_case

    monkeypatch.setattr(Device, "has_mma", property(lambda self: True))
    monkeypatch.setitem(dev.limits, "max-compute-workgroup-storage-size", 49152)    # the H100's
    cases = [attention_case("a", 150, 141, 93, 14, 2, 64, 240, prefill_mma=True),
             attention_case("b", 150, 141, 93, 14, 2, 64, 240, prefill_mma=True, prefill_units=48),
             attention_case("c", 130, 130, 17, 8, 2, 128, 4160, window=70, softcap=20.0, prefill_mma="4:32w",
                            prefill_units=-1),
             paged_attention_case("d", Batch([(0, 45, 70)], 1, 8, 30, pad=5, seed=11), 14, 2, 64, prefill_mma=True,
                                  prefill_units=-1),
             paged_attention_case("e", Batch([(2, 45, 70), (0, 500, 1), (1, 3, 1)], 3, 24, 120, pad=5), 8, 2, 64,
                                  prefill_mma="4:64")]
    n = 0
    for case in cases:
        shapes = [np.shape(x) for x in case.inputs]
        for types in (case.in_types, [case.in_types[0], "q8_0", "q8_0", *case.in_types[3:]]):
            out = [(shapes[0][0], case.attrs["n_head"] * case.attrs["v_head_dim"])]
            with dev.recording() as rec:
                Attention(dev, case.attrs, shapes, types, out)
            for file, _, defines in rec:
                src = dev.shader_source(file, defines, implementation="dawn")
                if file == "attention_mma.wgsl":
                    src = attention_stand_ins(src)
                (tmp_path / f"{n:02d}-{case.name}-{file}").write_text(src)
                n += 1
    assert sum("merge_units" in p.name for p in tmp_path.iterdir()) >= 3
    assert _tint_errors(tmp_path) == {}
