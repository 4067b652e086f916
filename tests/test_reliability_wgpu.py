"""GPU failures become DeviceError naming the op, kernel and shapes, on one line: a shader that does not
compile, wgpu validation errors (at bind-group creation and at submit), device loss; and sampling settings
at the edge of the u32 parameter block. Runs on whatever adapter exists (lavapipe in CI)."""
from __future__ import annotations

import gc
import re

import pytest
from click.testing import CliRunner

from oxigpu import LLM
from oxigpu.backends.wgpu import device as devmod
from oxigpu.backends.wgpu.device import Device, Dispatch
from oxigpu.cli.main import cli
from oxigpu.errors import DeviceError

pytestmark = pytest.mark.gpu
SAMPLED = {"temperature": 1.2, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 8}


@pytest.fixture(scope="module")
def path(tiny_models) -> str:
    return tiny_models["tiny-qwen2"]


@pytest.fixture
def fresh_device(dev, monkeypatch):
    """Device.get() hands out a new device (empty pipeline cache) for this test; the shared one returns after."""
    monkeypatch.setattr(Device, "_cache", {})
    yield
    gc.collect()


def test_shader_compile_error_names_node_op_kernel_and_shapes(path, fresh_device, monkeypatch):
    real = Device.shader_source

    def broken(self, file, defines=None):
        src = real(self, file, defines)
        return src + "\nfn oops() -> u32 { return 1.5; }\n" if file == "rms_norm.wgsl" else src
    monkeypatch.setattr(Device, "shader_source", broken)
    with pytest.raises(DeviceError) as info:
        LLM(path, backend="wgpu", n_ctx=64)
    msg = str(info.value)
    assert "\n" not in msg
    # the prefill's attn_norm runs in its q/k/v matmul's prologue (here the rms_norm kernel first)
    assert re.search(r"node '[^']*attn_norm[^']*' \(op matmul_multi, inputs \[64, 256\] f32, .* -> outputs "
                     r"\[64, 256\], .*\) \(kernel MatmulMultiKernel\): compiling shader 'rms_norm\.wgsl' entry "
                     r"'main' defines \{.*'GROUP': 256", msg), msg
    # the CLI prints it as one line and exits 1
    res = CliRunner().invoke(cli, ["run", "-m", path, "-p", "x", "--backend", "wgpu", "--n-ctx", "64"])
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert res.exit_code == 1 and len(errors) == 1 and "rms_norm.wgsl" in errors[0] and "Traceback" not in res.stderr


def test_bind_group_with_a_wrong_size_buffer_is_a_device_error(dev, tmp_path, monkeypatch):
    (tmp_path / "fixed.wgsl").write_text(
        "@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>, 64>;\n"
        "@compute @workgroup_size(1) fn main() { y[0] = vec4<f32>(1.0); }\n")
    monkeypatch.setattr(devmod, "_shader_root", lambda: tmp_path)
    pipe = dev.pipeline("fixed.wgsl", defines={"T": 1})
    with pytest.raises(DeviceError) as info:
        dev.bind_group(pipe, {1: dev.create_buffer(16)})         # the shader needs 1024 bytes
    msg = str(info.value)
    assert "\n" not in msg and "bind group for 'fixed.wgsl:main' (binding sizes {1: 16})" in msg
    assert "less than minimum 1024" in msg


def test_validation_error_at_submit_names_the_node(path, dev):
    llm = LLM(path, backend="wgpu", n_ctx=64)
    want = llm.generate("Hello there", seed=1, **SAMPLED).token_ids
    backend = llm._engine.backend
    loaded = backend._plans[llm._engine.prefill_plan.key]
    i = next(i for i, n in enumerate(loaded.nodes) if n.op == "rope_kv_store")
    good = loaded.node_dispatches[i][0]
    loaded.node_dispatches[i][0] = Dispatch(good.pipeline, good.bind_group, (70000, 1, 1))   # > 65535
    loaded.dispatches[:] = [d for ds in loaded.node_dispatches for d in ds]
    with pytest.raises(DeviceError) as info:
        llm.generate("A different prompt", seed=1, **SAMPLED)
    msg = str(info.value)
    node = loaded.nodes[i]
    assert "\n" not in msg and f"node {node.name!r} (op rope_kv_store, inputs [64, " in msg
    assert "(kernel RopeKvStore)" in msg and "70000" in msg and "65535" in msg
    loaded.node_dispatches[i][0] = good
    loaded.dispatches[:] = [d for ds in loaded.node_dispatches for d in ds]
    assert llm.generate("Hello there", seed=1, **SAMPLED).token_ids == want      # still usable


def test_device_loss_is_a_device_error_and_a_new_llm_gets_a_new_device(path, fresh_device):
    llm = LLM(path, backend="wgpu", n_ctx=64)
    want = llm.generate("Hello there", seed=1, **SAMPLED).token_ids
    lost = llm._engine.backend.dev
    lost.device.destroy()                                          # what a driver reset looks like
    with pytest.raises(DeviceError) as info:
        llm.generate("Hello there", seed=1, **SAMPLED)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("the GPU device was lost") and "load the model again" in msg
    assert lost.lost and Device.get() is not lost
    assert LLM(path, backend="wgpu", n_ctx=64).generate("Hello there", seed=1, **SAMPLED).token_ids == want


@pytest.mark.parametrize("kwargs", [
    {"top_k": 2**40}, {"repeat_last_n": 2**40, "repeat_penalty": 1.3}, {"temperature": 1e30},
    {"logit_bias": {7: 3e38}}, {"logit_bias": {7: 100.0, 9: float("-inf")}}, {"top_p": 1e-9}, {"min_p": 1.0},
])
def test_extreme_valid_sampling_settings_match_numpy(path, dev, kwargs):
    params = {**SAMPLED, **kwargs}
    gpu = LLM(path, backend="wgpu", n_ctx=64).generate("Hello there", seed=3, **params)
    cpu = LLM(path, backend="numpy", n_ctx=64).generate("Hello there", seed=3, **params)
    assert gpu.token_ids == cpu.token_ids and gpu.text == cpu.text
