"""The wgpu device layer on whatever adapter is present (lavapipe in CI)."""
from __future__ import annotations

import types

import numpy as np
import pytest

from oxigpu.backends.wgpu import device as devmod
from oxigpu.backends.wgpu.device import Device, Dispatch, Params, workgroups_for
from oxigpu.errors import DeviceError, InvalidParameterError

pytestmark = pytest.mark.gpu


@pytest.fixture
def shader_dir(tmp_path, monkeypatch):
    """Point the shader loader at a temporary directory (keeps the real common/ reachable)."""
    (tmp_path / "common").symlink_to(devmod._shader_root() / "common")
    monkeypatch.setattr(devmod, "_shader_root", lambda: tmp_path)
    return tmp_path


def test_cached_and_described(dev):
    assert Device.get() is dev
    info = dev.info()
    assert info["backend"] in ("Vulkan", "Metal", "D3D12")
    assert info["max_storage_binding"] > 0 and "max-buffer-size" in info["limits"]
    assert dev.is_software == (info["adapter_type"] == "CPU")
    assert isinstance(dev.has_f16, bool) and isinstance(dev.has_subgroups, bool)


def test_upload_read_roundtrip(dev):
    a = np.arange(37, dtype=np.float32) * 1.5
    buf = dev.upload(a)
    assert np.array_equal(dev.read(buf, np.float32, a.shape), a)
    assert np.array_equal(dev.read(buf, np.float32, (5,), offset=8), a[2:7])
    raw = np.arange(6, dtype=np.uint8)        # not a multiple of 4 bytes
    assert np.array_equal(dev.read(dev.upload(raw), np.uint8, (6,)), raw)


def test_params_layout():
    assert len(Params(pos=3, n_tokens=2).pack()) == Params.NBYTES == 64


def test_workgroups_for():
    assert workgroups_for(10) == (10, 1, 1)
    x, y, z = workgroups_for(262144)
    assert x <= 65535 and y <= 65535 and x * y >= 262144 and z == 1


def test_preprocessor_defines_includes_and_one_pass(dev, shader_dir):
    (shader_dir / "inc.wgsl").write_text("const ADD: f32 = {{ADD}};\n")
    (shader_dir / "k.wgsl").write_text(
        '#include "common/params.wgsl"\n#include "inc.wgsl"\n#include "inc.wgsl"\n'
        "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
        "@compute @workgroup_size({{WG}}) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
        "  y[g.x] = y[g.x] * 2.0 + ADD + f32(P.pos);\n}\n")
    src = dev.shader_source("k.wgsl", {"WG": 8, "ADD": "1.0"})
    assert src.count("const ADD") == 1 and "{{" not in src
    pipe = dev.pipeline("k.wgsl", defines={"WG": 8, "ADD": "1.0"})
    assert dev.pipeline("k.wgsl", defines={"ADD": "1.0", "WG": 8}) is pipe   # cache ignores dict order
    buf = dev.upload(np.ones(8, np.float32))
    bg = dev.bind_group(pipe, {0: dev.params_buffer, 1: buf})
    dev.write_params(Params(pos=10))
    dev.submit([Dispatch(pipe, bg, (1, 1, 1))] * 2)       # second dispatch sees the first's writes
    assert np.allclose(dev.read(buf, np.float32, (8,)), (1 * 2 + 11) * 2 + 11)


def test_bad_dispatch_still_raises_through_the_bare_encode_path(dev, shader_dir):
    """Device.encode calls the implementation's C API directly; an invalid command must still fail the submit, with the
    device's one-line error, and leave the device usable."""
    assert dev._raw is not None             # the bare C calls are in use
    (shader_dir / "k.wgsl").write_text("@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
                                       "@compute @workgroup_size(1) fn main() { y[0] = 7.0; }\n")
    pipe = dev.pipeline("k.wgsl")
    buf = dev.upload(np.zeros(4, np.float32))
    bg = dev.bind_group(pipe, {1: buf})
    with pytest.raises(DeviceError, match="65535"):
        dev.submit([Dispatch(pipe, bg, (70000, 1, 1))])
    dev.submit([Dispatch(pipe, bg, (1, 1, 1))])
    assert dev.read(buf, np.float32, (4,))[0] == 7.0


def test_shader_errors_name_shader_entry_defines(dev, shader_dir):
    (shader_dir / "bad.wgsl").write_text("@compute @workgroup_size(1) fn main() { let x: u32 = {{V}}; }\n")
    with pytest.raises(DeviceError, match=r"bad\.wgsl.*'main'.*'V': 'oops'"):
        dev.pipeline("bad.wgsl", defines={"V": "oops"})
    with pytest.raises(DeviceError, match="needs define 'V'"):
        dev.pipeline("bad.wgsl")
    with pytest.raises(DeviceError, match="not found"):
        dev.pipeline("missing.wgsl")


def _fake_wgpu(*adapters):
    gpu = types.SimpleNamespace(enumerate_adapters_sync=lambda: list(adapters))
    return types.SimpleNamespace(gpu=gpu)


def _adapter(backend: str, kind: str):
    return types.SimpleNamespace(info={"backend_type": backend, "adapter_type": kind, "device": f"{kind}-{backend}"})


def test_opengl_fallback_is_refused_with_install_hint():
    with pytest.raises(DeviceError, match="apt-get install libvulkan1 mesa-vulkan-drivers"):
        devmod._pick_adapter(_fake_wgpu(_adapter("OpenGL", "CPU")), "high-performance")


def test_discrete_gpu_preferred():
    a = [_adapter("Vulkan", "CPU"), _adapter("Vulkan", "DiscreteGPU"), _adapter("OpenGL", "IntegratedGPU")]
    assert devmod._pick_adapter(_fake_wgpu(*a), "high-performance") is a[1]


def _copy_to(dev, src, dst, nbytes):
    enc = dev.device.create_command_encoder()
    enc.copy_buffer_to_buffer(src, 0, dst, 0, nbytes)
    return enc.finish()


def test_read_submitted_reads_its_own_submission_while_a_later_one_is_queued(dev):
    """Decode batch b is read while batch b+1 is queued: each read sees its own submission's bytes."""
    src = dev.upload(np.arange(16, dtype=np.int32))
    rb = [dev.create_buffer(64, 0x0001 | 0x0008, f"readback {i}") for i in range(2)]   # MAP_READ | COPY_DST
    first = dev.submit_indexed(_copy_to(dev, src, rb[0], 64))
    dev.write(src, np.arange(100, 116, dtype=np.int32))   # queued after the first copy
    second = dev.submit_indexed(_copy_to(dev, src, rb[1], 64))
    assert second > first
    assert np.frombuffer(dev.read_submitted(rb[0], 64, first), np.int32).tolist() == list(range(16))
    assert np.frombuffer(dev.read_submitted(rb[1], 32, second), np.int32).tolist() == list(range(100, 108))
    assert all(b.map_state == "unmapped" for b in rb)


def test_read_submitted_unmaps_on_interrupt_and_names_unmappable_buffers(dev, monkeypatch):
    src = dev.upload(np.arange(4, dtype=np.int32))
    rb = dev.create_buffer(16, 0x0001 | 0x0008, "readback")
    ffi, lib, libf, from_view = dev._native

    class InterruptedCopy:   # Ctrl-C landing while the buffer is mapped
        def __getattr__(self, name):
            return getattr(ffi, name)

        def buffer(self, *args):
            raise KeyboardInterrupt
    monkeypatch.setattr(dev, "_native", (InterruptedCopy(), lib, libf, from_view))
    with pytest.raises(KeyboardInterrupt):
        dev.read_submitted(rb, 16, dev.submit_indexed(_copy_to(dev, src, rb, 16)))
    monkeypatch.undo()
    assert np.frombuffer(dev.read_submitted(rb, 16, dev.submit_indexed(_copy_to(dev, src, rb, 16))),
                         np.int32).tolist() == [0, 1, 2, 3]           # it was unmapped: maps again
    with pytest.raises(Exception, match="storage-only"):
        dev.read_submitted(dev.create_buffer(16, label="storage-only"), 16,
                           dev.submit_indexed(dev.device.create_command_encoder().finish()))


def test_concurrent_pipeline_calls_compile_once(dev, shader_dir, monkeypatch):
    """Threads asking for one new key while it compiles all get the one pipeline, compiled once; a failed
    compile reaches every waiting thread and is not cached, so a later call compiles again."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    (shader_dir / "k.wgsl").write_text("@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
                                       "@compute @workgroup_size(1) fn main() { y[0] = {{V}}; }\n")
    sources = []
    start = threading.Barrier(6)
    real = dev.shader_source

    def slow_source(file, defines=None):
        sources.append(file)
        time.sleep(0.3)                   # the other threads ask while this compile is in flight
        return real(file, defines)

    monkeypatch.setattr(dev, "shader_source", slow_source)
    before = dev.pipeline_count

    def ask(v):
        start.wait()
        return dev.pipeline("k.wgsl", defines={"V": v})

    with ThreadPoolExecutor(6) as ex:
        pipes = list(ex.map(ask, ["1.0"] * 6))
    assert len(sources) == 1 and all(p is pipes[0] for p in pipes)
    assert dev.pipeline_count == before + 1
    with ThreadPoolExecutor(6) as ex:
        errors = [f.exception() for f in [ex.submit(ask, "oops") for _ in range(6)]]
    assert len(sources) == 2 and all(isinstance(e, DeviceError) and "'V': 'oops'" in str(e) for e in errors)
    assert dev.pipeline_count == before + 1            # the failed key was dropped
    with pytest.raises(DeviceError, match="oops"):
        dev.pipeline("k.wgsl", defines={"V": "oops"})
    assert len(sources) == 3



def test_staged_writes_land_whole(dev, monkeypatch):
    """Dawn's large writes go through two reused staging buffers (Device._write_staged, plain WebGPU calls,
    so checked here on wgpu-native): several turns of both buffers, a partial last chunk, an offset, and
    a small write beside it that takes the direct path."""
    monkeypatch.setattr(dev, "implementation", "dawn")
    monkeypatch.setattr(dev, "stage_bytes", 4096)
    monkeypatch.setattr(dev, "_stages", [])
    a = np.random.default_rng(0).integers(0, 255, 4096 * 5 + 1000, dtype=np.uint8)
    b = np.random.default_rng(1).integers(0, 255, 300, dtype=np.uint8)
    buf = dev.create_buffer(64 + a.nbytes + b.nbytes)
    dev.write(buf, a, 32)
    dev.write(buf, b, 32 + a.nbytes)
    out = dev.read(buf, np.uint8, (32 + a.nbytes + b.nbytes,))
    assert (out[32:32 + a.nbytes] == a).all() and (out[32 + a.nbytes:] == b).all() and not out[:32].any()
    assert len(dev._stages) == 2


def test_implementation_choice(monkeypatch):
    monkeypatch.setenv("OXIGPU_WEBGPU", "wgpu-native")
    assert devmod.implementation() == "wgpu-native"
    monkeypatch.setenv("OXIGPU_WEBGPU", "vulkan")
    with pytest.raises(InvalidParameterError, match="OXIGPU_WEBGPU must be auto, wgpu-native or dawn"):
        devmod.implementation()
    monkeypatch.setenv("OXIGPU_WEBGPU", "")
    # auto: Dawn only where wgpu-native sees a hardware GPU (lavapipe here and in CI) and wgpudawn finds one
    assert devmod.implementation() == ("dawn" if devmod._dawn_has_gpu() else "wgpu-native")


def test_robustness_choice(monkeypatch):
    """Dawn's shader bounds checks are off unless OXIGPU_ROBUST=1; anything else is refused by name."""
    monkeypatch.delenv("OXIGPU_ROBUST", raising=False)
    assert devmod.robust() is False
    monkeypatch.setenv("OXIGPU_ROBUST", "1")
    assert devmod.robust() is True
    monkeypatch.setenv("OXIGPU_ROBUST", "yes")
    with pytest.raises(InvalidParameterError, match="OXIGPU_ROBUST must be 0 or 1"):
        devmod.robust()


def test_dawn_sources_enable_what_tint_wants(dev, shader_dir, monkeypatch):
    """naga takes subgroup builtins and f16 without `enable`; Tint (Dawn) needs them, and its subgroup
    uniformity analysis switched off (the reductions sit in branches uniform per subgroup by construction)."""
    (shader_dir / "sg.wgsl").write_text("// f16 only in a comment\nfn f(x: f32) -> f32 { return subgroupAdd(x); }\n")
    (shader_dir / "h.wgsl").write_text("fn g(x: f32) -> f16 { return f16(x); }\n")
    assert "enable" not in dev.shader_source("sg.wgsl") + dev.shader_source("h.wgsl")
    monkeypatch.setattr(dev, "implementation", "dawn")
    sg, h = dev.shader_source("sg.wgsl"), dev.shader_source("h.wgsl")
    assert sg.startswith("enable subgroups;\ndiagnostic(off, subgroup_uniformity);\n") and "f16;" not in sg
    assert h.startswith("enable f16;\n") and "subgroups" not in h


def test_kernels_source_prints_the_assembled_wgsl(dev):
    """`oxigpu kernels --source NAME`: the pipelines of the matching check cases (by case text or
    file:entry), includes and defines expanded, as this adapter would build them; each compiles as
    printed. Recording compiles nothing; an unknown name exits 2."""
    from click.testing import CliRunner

    from oxigpu.cli.main import cli
    n = dev.pipeline_count
    res = CliRunner().invoke(cli, ["kernels", "--source", "kv_store kv_store T=8*"])
    assert res.exit_code == 0, res.output
    assert dev.pipeline_count == n
    head, defines, *body = res.output.splitlines()
    assert head.startswith("// ==== kv_store.wgsl:main (as built for: kv_store kv_store T=8")
    assert defines == "// defines: HK=64 HV=96 NT=1280"
    src = "\n".join(body)
    assert "{{" not in src and "#include" not in src and "// ---- common/half.wgsl" in src
    dev.device.create_shader_module(code=src)
    res = CliRunner().invoke(cli, ["kernels", "--source", "rope_kv.wgsl:*"])
    assert res.exit_code == 0 and res.output.count("// ==== rope_kv.wgsl:main") == 3   # three distinct cases
    assert "generated blocks" not in res.output
    res = CliRunner().invoke(cli, ["kernels", "--source", "no such kernel"])
    assert res.exit_code == 2 and "no kernel check or shader matches" in res.output
