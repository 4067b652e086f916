"""The wgpu device layer: adapter choice, buffers, WGSL loading, pipelines and one-pass submission.

Everything GPU-side goes through one cached :class:`Device`. Kernels never touch wgpu directly for
bookkeeping; they ask the device for pipelines (compiled once per (file, entry, defines)), create their
bind groups once, and hand back :class:`Dispatch` triples that :meth:`Device.submit` encodes in a single
compute pass.

Shader preprocessing (deliberately tiny; see :meth:`Device.shader_source`):

- ``{{NAME}}`` is replaced by ``str(defines[NAME])``; an unknown name is an error, never left in place.
  Substitution runs before includes, so ``#include "quant/{{QUANT}}.wgsl"`` selects a snippet.
- ``#include "rel/path.wgsl"`` (relative to ``oxigpu/shaders/``) pastes a file once per module; included
  files are preprocessed with the same defines.
- ``enable ...;`` lines anywhere are hoisted to the top (WGSL requires them first), deduplicated.

Textual defines (not pipeline-overridable constants) because they also size workgroup arrays and
``@workgroup_size``, which overrides cannot do portably, and they pick include files.

Binding convention shared by every kernel: ``@group(0) @binding(0)`` is the per-step :class:`Params`
uniform ``P`` (``#include "common/params.wgsl"``) in kernels that need step values (``pos``,
``n_tokens``); data bindings start at 1. The graph runtime owns one params buffer and writes it once per step
(:meth:`write_params`).
"""
from __future__ import annotations

import collections
import functools
import os
import re
import struct
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ...errors import DeviceError, InvalidParameterError

_INSTALL_HINT = ("install a Vulkan driver (Debian/Ubuntu: `apt-get install libvulkan1 mesa-vulkan-drivers`, "
                 "which gives the software lavapipe device) or run with backend='numpy'")

STORAGE = 0x0080 | 0x0004 | 0x0008    # wgpu.BufferUsage.STORAGE | COPY_SRC | COPY_DST
UNIFORM = 0x0040 | 0x0008             # UNIFORM | COPY_DST
PARAMS_BINDING = 0
SUBGROUP_MATRIX = "chromium-experimental-subgroup-matrix"
_MAX_QUERIES = 4096   # wgpu's limit on queries in one query set


def one_line(e: BaseException) -> str:
    """wgpu's multi-line validation report ("Validation Error\\n\\nCaused by: ...") as one line."""
    return " ".join(str(e).split()) or type(e).__name__

@dataclass
class Params:
    """Per-step values, packed as ``shaders/common/params.wgsl`` declares them (64 bytes, 16-aligned): the
    step's first position, its number of valid rows and of valid sequence slots (``gather_rows``). Only the
    runtime writes this; kernels read it. Sampling settings are not step values: the sampler reads them per
    sequence from its own buffer."""

    pos: int = 0
    n_tokens: int = 1
    n_seqs: int = 1

    NBYTES = 64

    def pack(self) -> bytes:
        return struct.pack("<3I", self.pos, self.n_tokens, self.n_seqs).ljust(self.NBYTES, b"\0")


class Dispatch(NamedTuple):
    """One precomputed compute dispatch: all the hot loop needs."""

    pipeline: Any
    bind_group: Any
    workgroups: tuple[int, int, int]


Binding = Any  # a GPUBuffer, or (buffer, offset, size) for a sub-range


IMPLEMENTATIONS = ("wgpu-native", "dawn")
_NOT_COMPUTE = ("OpenGL", "OpenGLES", "GL", "Empty", "Null")   # backends refused (see pick_adapter)
_DAWN_TOGGLES = {
    "enable": ("allow_unsafe_apis",            # chromium-experimental-subgroup-matrix (the tensor cores)
               "vulkan_enable_f16_on_nvidia"),  # Dawn turns shader-f16 off on NVIDIA's Vulkan by default
    "disable": ("timestamp_quantization",),     # profiles need the timer's full precision
}


def robust() -> bool:
    """Whether Dawn keeps its robustness: Tint's clamp of every array index and Vulkan's robustBufferAccess,
    which a browser needs against hostile shaders. The engine runs only its own, tested kernels, whose
    indices are bounded by shapes validated at load, so ``OXIGPU_ROBUST`` = ``0`` (the default) turns it off,
    as native engines (CUDA, llama.cpp) run (prefill ~1.5x faster, decode a few %). ``1`` keeps it (a
    suspected out-of-bounds kernel bug; wgpu-native keeps its own bounds checks either way)."""
    v = os.environ.get("OXIGPU_ROBUST", "") or "0"
    if v not in ("0", "1"):
        raise InvalidParameterError(f"OXIGPU_ROBUST must be 0 or 1, not {v!r}")
    return v == "1"


_dawn_robust = functools.cache(robust)
"""robust() as Dawn's instance was set up with (once per process), for what :meth:`Device.info` reports."""


def implementation() -> str:
    """Which WebGPU implementation the device runs on: ``OXIGPU_WEBGPU`` = ``dawn`` (Google's, through the
    ``wgpudawn`` package: the same Python API, faster submission and readback, and subgroup matrices, i.e.
    the GPU's matrix units, where the adapter has them), ``wgpu-native`` (wgpu-py's own), or ``auto`` (the
    default): Dawn where wgpudawn is installed (``pip install oxigpu[dawn]``) and finds a hardware GPU,
    else wgpu-native (Dawn refuses software Vulkan such as lavapipe)."""
    v = os.environ.get("OXIGPU_WEBGPU", "") or "auto"
    if v not in ("auto", *IMPLEMENTATIONS):
        raise InvalidParameterError(f"OXIGPU_WEBGPU must be auto, {' or '.join(IMPLEMENTATIONS)}, not {v!r}")
    if v == "auto":
        return "dawn" if _dawn_has_gpu() else "wgpu-native"
    return v


@functools.cache
def _dawn_has_gpu() -> bool:
    try:   # asked only where wgpu-native sees a hardware GPU: Dawn would print its refusal of lavapipe
        if pick_adapter(webgpu_module("wgpu-native"), "high-performance").info["adapter_type"] == "CPU":
            return False
    except DeviceError:
        return False
    try:
        adapters = webgpu_module("dawn").gpu.enumerate_adapters_sync()
    except Exception:   # not installed, or no adapter at all
        return False
    return any(a.info["adapter_type"] != "CPU" and a.info["backend_type"] not in _NOT_COMPUTE for a in adapters)


@functools.cache
def webgpu_module(impl: str) -> Any:
    """The wgpu-py API module of ``impl`` (Dawn's instance is set up with :data:`_DAWN_TOGGLES` once)."""
    if impl == "dawn":
        try:
            import wgpudawn
            from wgpudawn.backends.dawn import extras
        except ImportError as e:
            raise DeviceError(f"OXIGPU_WEBGPU=dawn needs the wgpudawn package ({e}); pip install wgpudawn, "
                              f"or unset OXIGPU_WEBGPU") from e
        fast = () if _dawn_robust() else ("disable_robustness",)
        extras.set_instance_extras(enable_toggles=_DAWN_TOGGLES["enable"] + fast,
                                   disable_toggles=_DAWN_TOGGLES["disable"])
        return wgpudawn
    import wgpu
    return wgpu


def _native_calls(impl: str) -> tuple[Any, Any, Any, Any] | None:
    """wgpu-native's cffi handles (ffi, raw lib, error-raising lib, string-view decoder), or None (Dawn)."""
    if impl != "wgpu-native":
        return None
    try:
        from wgpu.backends.wgpu_native._api import ffi, from_c_string_view, lib, libf
        return ffi, lib, libf, from_c_string_view
    except (ImportError, AttributeError):   # pragma: no cover - another wgpu-py backend
        return None


def _raw_pass_calls(impl: str) -> tuple[Any, Any, Any, Any] | None:
    """The bare C calls for the three per-dispatch pass calls (set pipeline, set bind group, dispatch) and
    NULL, from ``impl``'s cffi library (webgpu.h names both implementations share).

    wgpu-py's wrappers cost ~3 us per dispatch (error capture and argument handling) against ~1 us for the
    bare calls, and a decode step encodes ~130-250 dispatches, so the bare calls halve the host's encode
    time. Nothing is lost: the implementation records a bad command on the pass and the (wrapped)
    ``finish()`` of the encoder raises it as a GPUValidationError (tests/test_wgpu_device.py)."""
    try:
        if impl == "dawn":
            from wgpudawn.backends.dawn._ffi import ffi, lib
        else:
            from wgpu.backends.wgpu_native._api import ffi, lib
    except (ImportError, AttributeError):   # pragma: no cover - another wgpu-py backend
        return None
    return (lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup,
            lib.wgpuComputePassEncoderDispatchWorkgroups, ffi.NULL)


def _shader_root() -> Path:
    return Path(str(resources.files("oxigpu") / "shaders"))


_INCLUDE = re.compile(r'^[ \t]*#include[ \t]+"([^"]+)"[ \t]*$', re.M)
_DEFINE = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
_SUBGROUP_USE = re.compile(r"\bsubgroup[A-Z]\w*\s*\(|\bsubgroup_(size|invocation_id|id)\b")
_F16_USE = re.compile(r"\bf16\b")
_ENABLE = re.compile(r"^[ \t]*enable[ \t]+[^;]+;[ \t]*$", re.M)


class Device:
    """One wgpu adapter + device, with buffer helpers, a shader loader and a pipeline cache."""

    _cache: dict[str, Device] = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, prefer: str = "high-performance") -> Device:
        """The process-wide device for this power preference (created on first use, and again after the
        cached one was lost: backends already holding the lost one keep failing; new ones work)."""
        with cls._lock:
            if prefer not in cls._cache or cls._cache[prefer].lost:
                cls._cache[prefer] = cls(prefer)
            return cls._cache[prefer]

    def __init__(self, prefer: str = "high-performance"):
        self.implementation = implementation()
        try:
            wgpu = webgpu_module(self.implementation)
        except ImportError as e:  # pragma: no cover - wgpu is a hard dependency
            raise DeviceError(f"wgpu-py is not importable ({e}); pip install wgpu") from e
        self._wgpu = wgpu
        self._native = _native_calls(self.implementation)
        self._raw = _raw_pass_calls(self.implementation)
        self.adapter = pick_adapter(wgpu, prefer)
        feats = set(self.adapter.features)
        # Dawn's device is thread-safe only with implicit-device-synchronization (kernels are built on
        # several threads while the weights upload; without it, loads crashed now and then)
        want = [f for f in ("shader-f16", "subgroup", "subgroups", "timestamp-query", SUBGROUP_MATRIX,
                            "implicit-device-synchronization") if f in feats]
        # wgpu-native asks for the adapter's best limits by itself; Dawn gives the WebGPU defaults unless
        # asked (16 KiB of workgroup memory, 128 MiB storage bindings)
        limits = dict(self.adapter.limits) if self.implementation == "dawn" else None
        try:
            self.device = self.adapter.request_device_sync(label="oxigpu", required_features=want,
                                                           required_limits=limits)
        except Exception as e:
            raise DeviceError(f"requesting a device from {self.adapter.info['device']!r} failed: {e}") from e
        self.queue = self.device.queue
        self.features = set(self.device.features)
        self.limits = dict(self.device.limits)
        self.max_storage_binding = int(min(self.limits["max-storage-buffer-binding-size"],
                                           self.limits["max-buffer-size"]))
        """Largest storage binding in bytes; kernels split bigger tensors. Tests lower it."""
        self.storage_align = int(self.limits["min-storage-buffer-offset-alignment"])
        self._pipelines: dict[tuple, Future] = {}
        self._pipeline_lock = threading.Lock()
        self._recorded: list[tuple[str, str, dict[str, Any]]] | None = None
        self._buffers: weakref.WeakSet[Any] = weakref.WeakSet()   # every buffer created and not yet freed
        self.lost = False
        """Set once an error says the device is lost (driver reset, GPU removed, ``device.destroy()``)."""
        self.stage_bytes = 32 << 20
        """Size of each upload staging buffer (Dawn's writes of more than an eighth of it go through them)."""
        self._stages: list[Any] = []
        self._stage_turn = 0
        self._sync_buf = self.create_buffer(16)
        # STORAGE too: resident decode batches write each step's Params on the GPU (next_params.wgsl)
        self.params_buffer = self.create_buffer(Params.NBYTES, UNIFORM | STORAGE, label="params")
        self.step_lock = threading.RLock()
        """Held by every backend around each write-params/submit/read-back sequence: all backends (all GPU
        ``LLM``s of the process) share this device and its ``params_buffer``, so one model's step must not
        read another's params, and wgpu's map/poll calls are not made from two threads at once."""
        self._stage_lock = threading.Lock()   # the upload staging buffers (two models loading at once)
        self.counts: collections.Counter[str] = collections.Counter()
        """Host<->device traffic by kind ("submit", "write", "read"): what a decode step costs in round trips
        and uploads, counted here so tests and profiles see every path (the backend calls no queue directly
        on a step's path)."""
        self.write_params(Params())

    # -- description ------------------------------------------------------------------------------
    @property
    def is_software(self) -> bool:
        """A CPU adapter (lavapipe/llvmpipe, SwiftShader): correct but slower than numpy."""
        return self.adapter.info["adapter_type"] == "CPU"

    @property
    def int8_dots(self) -> bool:
        """Whether large decode GEMVs and the prefill GEMMs of quantized weights round x to int8 and
        reduce by integer dots (``q8x`` in ops/matmul.py, ``gemm_q8.wgsl`` in ops/gemm.py; as llama.cpp's
        CUDA GEMV and MMQ do): on hardware adapters, where they are faster (fewer instructions per weight
        byte; the prefill GEMM ~1.5x); not on CPU adapters, whose float kernels match the numpy
        backend to f32 rounding. ``OXIGPU_INT8_DOTS=0`` / ``=1`` overrides (0: float math on a GPU)."""
        v = os.environ.get("OXIGPU_INT8_DOTS", "")
        if v not in ("", "0", "1"):
            raise InvalidParameterError(f"OXIGPU_INT8_DOTS must be 0 or 1, not {v!r}")
        return v == "1" if v else not self.is_software

    @property
    def has_f16(self) -> bool:
        return "shader-f16" in self.features

    @property
    def has_subgroups(self) -> bool:
        return bool({"subgroup", "subgroups"} & self.features)   # wgpu-native's name, WebGPU's (Dawn)

    @functools.cached_property
    def subgroup_min_size(self) -> int:
        """The narrowest subgroup the adapter may run a kernel in (0: unknown, or no subgroups): kernels
        whose shuffles span a team of L lanes take it only where this is at least L. NVIDIA's are always 32."""
        if not self.has_subgroups:
            return 0
        info = dict(self.adapter.info)
        if int(info.get("vendor_id") or 0) == 0x10DE:
            return 32
        # wgpu-native 0.32 names it stackgroup_min_size
        for key in ("subgroup_min_size", "stackgroup_min_size", "subgroupMinSize"):
            if int(info.get(key) or 0) > 0:
                return int(info[key])
        if self.implementation == "dawn":
            from wgpudawn.backends.dawn import extras
            props = extras.get_adapter_properties(self.adapter)
            for key in ("subgroup_min_size", "subgroupMinSize"):
                if int(props.get(key) or 0) > 0:
                    return int(props[key])
        return 0

    @functools.cached_property
    def has_mma(self) -> bool:
        """Whether the prefill GEMM runs on the GPU's matrix units (``gemm_mma.wgsl``): Dawn's subgroup
        matrices with f16 16x16x16 products into f32, in subgroups of 32 (NVIDIA's; the kernel's lane
        mapping). ``OXIGPU_MMA=0`` keeps the integer-dot / f32 GEMMs (A/B runs)."""
        v = os.environ.get("OXIGPU_MMA", "")
        if v not in ("", "0", "1"):
            raise InvalidParameterError(f"OXIGPU_MMA must be 0 or 1, not {v!r}")
        if v == "0" or SUBGROUP_MATRIX not in self.features or not self.has_f16:
            return False
        from wgpudawn.backends.dawn import extras  # only Dawn offers the feature
        configs = extras.get_adapter_properties(self.adapter).get("subgroup_matrix_configs", [])
        return any((c["component_type"], c["result_component_type"], c["m"], c["n"], c["k"],
                    c["max_subgroup_size"]) == ("f16", "f32", 16, 16, 16, 32) for c in configs)

    @property
    def has_timestamps(self) -> bool:
        return "timestamp-query" in self.features

    def info(self) -> dict[str, Any]:
        """What the engine runs on, for logs, `oxigpu kernels` and bug reports."""
        ai = self.adapter.info
        return {"name": ai["device"], "vendor": ai["vendor"], "description": ai["description"],
                "backend": ai["backend_type"], "adapter_type": ai["adapter_type"], "webgpu": self.implementation,
                "features": sorted(self.features), "limits": dict(self.limits),
                "max_storage_binding": self.max_storage_binding, "int8_dots": self.int8_dots, "mma": self.has_mma,
                "robust": self.implementation != "dawn" or _dawn_robust()}

    # -- errors ----------------------------------------------------------------------------------
    def error(self, what: str, e: BaseException) -> DeviceError:
        """A one-line DeviceError for a failed wgpu call; notes device loss (see :attr:`lost`)."""
        text = one_line(e)
        if "lost" in text.lower():
            self.lost = True
        if self.lost:
            return DeviceError(f"the GPU device was lost ({self.adapter.info['device']}); {what} failed: {text}; "
                               f"load the model again (a new LLM) or use backend='numpy'")
        return DeviceError(f"{what} failed: {text}")

    # -- buffers ---------------------------------------------------------------------------------
    def live_buffers(self) -> int:
        """How many buffers created through this device are still alive (a leak check for tests)."""
        return len(self._buffers)

    def create_buffer(self, nbytes: int, usage: int = STORAGE, label: str = "") -> Any:
        """A zero-filled buffer; sizes round up to 16 bytes (uniform and vec4 bindings need it)."""
        size = max(16, (int(nbytes) + 15) // 16 * 16)
        if size > self.limits["max-buffer-size"]:
            raise DeviceError(f"buffer {label!r} of {nbytes} bytes exceeds the device's max-buffer-size "
                              f"{self.limits['max-buffer-size']}")
        try:
            buf = self.device.create_buffer(size=size, usage=usage, label=label)
        except Exception as e:
            raise self.error(f"creating buffer {label!r} of {size} bytes", e) from e
        self._buffers.add(buf)
        return buf

    def upload(self, array: np.ndarray | bytes, usage: int = STORAGE, label: str = "") -> Any:
        """A new buffer holding ``array``'s bytes (padded with zeros to 16 bytes)."""
        data = memoryview(np.ascontiguousarray(array)).cast("B") if isinstance(array, np.ndarray) \
            else memoryview(array).cast("B")
        buf = self.create_buffer(len(data), usage, label)
        self.write(buf, data)
        return buf

    def write(self, buffer: Any, data: np.ndarray | bytes | memoryview, offset: int = 0) -> None:
        """Write host bytes into ``buffer`` at ``offset`` (tail padded to the 4-byte rule)."""
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) \
            else np.frombuffer(data, np.uint8)
        if offset % 4:
            raise DeviceError(f"write offset {offset} is not a multiple of 4")
        if raw.size % 4:
            raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
        if raw.size:
            self.counts["write"] += 1
            try:
                if self.implementation == "dawn" and raw.size >= self.stage_bytes // 8:
                    self._write_staged(buffer, raw, offset)
                else:
                    self.queue.write_buffer(buffer, offset, raw)
            except Exception as e:
                raise self.error(f"writing {raw.size} bytes to buffer {buffer.label!r}", e) from e

    def _write_staged(self, buffer: Any, raw: np.ndarray, offset: int) -> None:
        """``raw`` into ``buffer`` through two MAP_WRITE buffers of :attr:`stage_bytes`, used in turn (each
        mapped again once its last copy is done, so the host fills one while the GPU copies the other).

        Dawn's writeBuffer takes fresh staging memory on every call, at a third of wgpu-native's upload
        rate; reused staging memory is faulted in once."""
        with self._stage_lock:
            self._write_staged_locked(buffer, raw, offset)

    def _write_staged_locked(self, buffer: Any, raw: np.ndarray, offset: int) -> None:
        if not self._stages:
            self._stages = [self.device.create_buffer(size=self.stage_bytes, usage=0x0002 | 0x0004,   # MAP_WRITE |
                                                      mapped_at_creation=True, label="upload staging")   # COPY_SRC
                            for _ in range(2)]
        for o in range(0, raw.size, self.stage_bytes):
            st = self._stages[self._stage_turn % 2]
            self._stage_turn += 1
            if st.map_state != "mapped":
                st.map_sync(0x0002)   # MAP_WRITE: waits for this buffer's last copy only
            n = min(self.stage_bytes, raw.size - o)
            st.write_mapped(raw[o:o + n], 0)
            st.unmap()
            enc = self.device.create_command_encoder()
            enc.copy_buffer_to_buffer(st, 0, buffer, offset + o, n)
            self.queue.submit([enc.finish()])

    def read(self, buffer: Any, dtype: Any = np.float32, shape: Sequence[int] | int | None = None,
             offset: int = 0) -> np.ndarray:
        """Copy a buffer range back to the host; this also waits for all submitted work."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape)) if shape is not None else (buffer.size - offset) // dtype.itemsize
        nbytes = count * dtype.itemsize
        size = (nbytes + 3) // 4 * 4
        self.counts["read"] += 1
        try:
            raw = np.frombuffer(self.queue.read_buffer(buffer, offset, size), np.uint8)[:nbytes]
        except Exception as e:
            raise self.error(f"reading {size} bytes of buffer {buffer.label!r}", e) from e
        out = raw.view(dtype).copy()
        return out.reshape(shape) if shape is not None else out

    def sync(self) -> None:
        """Block until submitted work is done (reads back 16 bytes: on_submitted_work_done is broken)."""
        self.counts["read"] += 1
        try:
            self.queue.read_buffer(self._sync_buf, 0, 16)
        except Exception as e:
            raise self.error("waiting for the GPU", e) from e

    def uniform(self, words: Sequence[int | float]) -> Any:
        """A small constant uniform buffer of u32/f32 words (ints pack as u32, floats as f32).

        For per-dispatch shape constants written once at encode time; never per step.
        """
        packed = b"".join(struct.pack("<f", w) if isinstance(w, float) else struct.pack("<I", w & 0xFFFFFFFF)
                          for w in words)
        return self.upload(packed, UNIFORM, label="dims")

    def write_params(self, params: Params) -> None:
        self.counts["write"] += 1
        try:
            self.queue.write_buffer(self.params_buffer, 0, params.pack())
        except Exception as e:
            raise self.error("writing the step parameters", e) from e

    # -- shaders and pipelines ------------------------------------------------------------------
    def shader_source(self, file: str, defines: Mapping[str, Any] | None = None,
                      implementation: str | None = None) -> str:
        """Preprocess ``oxigpu/shaders/<file>``: ``{{NAME}}`` substitution, ``#include``, ``enable``; for this
        device's WebGPU implementation, or ``implementation`` (tests: Dawn's source on wgpu-native)."""
        defines = dict(defines or {})
        seen: set[str] = set()
        enables: list[str] = []

        def load(rel: str, chain: tuple[str, ...]) -> str:
            path = _shader_root() / rel
            if not path.is_file():
                raise DeviceError(f"shader file {rel!r} not found (included from {' -> '.join(chain) or 'top'})")
            text = _DEFINE.sub(lambda m: subst(m, rel), path.read_text())
            for line in _ENABLE.findall(text):
                if line.strip() not in enables:
                    enables.append(line.strip())
            text = _ENABLE.sub("", text)

            def inc(m: re.Match) -> str:
                name = m.group(1)
                if name in seen:
                    return ""
                seen.add(name)
                return f"// ---- {name}\n{load(name, chain + (rel,))}"
            return _INCLUDE.sub(inc, text)

        def subst(m: re.Match, rel: str) -> str:
            if m.group(1) not in defines:
                raise DeviceError(f"shader {rel!r} needs define {m.group(1)!r}; given {sorted(defines)}")
            v = defines[m.group(1)]
            return ("true" if v else "false") if isinstance(v, bool) else str(v)

        seen.add(file)
        body = load(file, ())
        if (implementation or self.implementation) == "dawn":   # Tint wants the extensions naga takes silently
            code = re.sub(r"//[^\n]*", "", body)
            if _SUBGROUP_USE.search(code) and "enable subgroups;" not in enables:
                # the lanes' reductions run where Tint cannot prove all lanes of a subgroup are (they are:
                # every branch they sit in is uniform per subgroup by construction, as naga assumes)
                enables += ["enable subgroups;", "diagnostic(off, subgroup_uniformity);"]
            if _F16_USE.search(code) and "enable f16;" not in enables:
                enables.append("enable f16;")
        return "\n".join(enables + [body])

    def pipeline(self, file: str, entry: str = "main", defines: Mapping[str, Any] | None = None) -> Any:
        """A compute pipeline (auto layout), compiled once per (file, entry, defines).

        Thread-safe, for kernels built in parallel (``WgpuBackend.compile_threads``): the first caller of
        a key compiles it, later ones (on any thread) wait for that one Future; a failed compile is
        raised to all of them and dropped from the cache, so a later call tries again."""
        key = (file, entry, tuple(sorted((k, str(v)) for k, v in (defines or {}).items())))
        if self._recorded is not None:
            self._recorded.append((file, entry, dict(defines or {})))
            return None
        with self._pipeline_lock:
            future = self._pipelines.get(key)
            mine = future is None
            if mine:
                future = self._pipelines[key] = Future()
        if not mine:
            return future.result()
        try:
            src = self.shader_source(file, defines)
            try:
                module = self.device.create_shader_module(code=src, label=f"{file}:{entry}")
                pipe = self.device.create_compute_pipeline(
                    layout="auto", compute={"module": module, "entry_point": entry}, label=f"{file}:{entry}")
            except Exception as e:
                raise self.error(f"compiling shader {file!r} entry {entry!r} defines {dict(defines or {})}",
                                 e) from e
        except BaseException as e:
            with self._pipeline_lock:
                del self._pipelines[key]
            future.set_exception(e)
            raise
        future.set_result(pipe)
        return pipe

    @contextmanager
    def recording(self) -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
        """Within the block, :meth:`pipeline` records (file, entry, defines) and returns None instead of
        compiling: which shaders a kernel would build (``oxigpu kernels --source``). Kernels built here
        cannot encode."""
        self._recorded: list[tuple[str, str, dict[str, Any]]] | None = []
        try:
            yield self._recorded
        finally:
            self._recorded = None

    @property
    def pipeline_count(self) -> int:
        """Distinct pipelines compiled (or compiling) on this device."""
        return len(self._pipelines)

    def bind_group(self, pipeline: Any, bindings: Mapping[int, Binding], group: int = 0) -> Any:
        """A bind group for ``pipeline``: binding index -> buffer or (buffer, offset, size). Create once."""
        entries = []
        for idx, b in sorted(bindings.items()):
            buf, off, size = (b if isinstance(b, tuple) else (b, 0, b.size))
            entries.append({"binding": idx, "resource": {"buffer": buf, "offset": off, "size": size}})
        try:
            return self.device.create_bind_group(layout=pipeline.get_bind_group_layout(group), entries=entries)
        except Exception as e:
            sizes = {i: (b[2] if isinstance(b, tuple) else b.size) for i, b in bindings.items()}
            raise self.error(f"bind group for {pipeline.label!r} (binding sizes {sizes})", e) from e

    # -- execution -------------------------------------------------------------------------------
    def encode(self, encoder: Any, dispatches: Sequence[Dispatch],
               timestamp_writes: Mapping[str, Any] | None = None) -> None:
        """Record ``dispatches`` into one compute pass of ``encoder`` (``timestamp_writes``: see
        :meth:`time_passes`)."""
        cp = encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
        last_pipe = None
        if self._raw is None:
            for pipe, bg, (x, y, z) in dispatches:
                if pipe is not last_pipe:
                    cp.set_pipeline(pipe)
                    last_pipe = pipe
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(x, y, z)
        else:
            set_pipeline, set_bind_group, dispatch, null = self._raw
            h = cp._internal
            for pipe, bg, (x, y, z) in dispatches:
                if pipe is not last_pipe:
                    set_pipeline(h, pipe._internal)
                    last_pipe = pipe
                set_bind_group(h, 0, bg._internal, 0, null)
                dispatch(h, x, y, z)
        cp.end()

    def submit(self, dispatches: Sequence[Dispatch]) -> None:
        """Encode ``dispatches`` in ONE compute pass and submit it (does not wait)."""
        self.counts["submit"] += 1
        try:
            enc = self.device.create_command_encoder()
            self.encode(enc, dispatches)
            self.queue.submit([enc.finish()])
        except Exception as e:
            raise self.error(f"submitting {len(dispatches)} dispatches", e) from e

    def prepare(self, dispatches: Sequence[Dispatch]) -> Any:
        """``dispatches`` encoded in one compute pass of a finished command buffer, for
        :meth:`submit_prepared` later: encoded while the GPU is busy anyway, off the path between a
        step's input writes and its submit."""
        try:
            enc = self.device.create_command_encoder()
            self.encode(enc, dispatches)
            return enc.finish()
        except Exception as e:
            raise self.error(f"encoding {len(dispatches)} dispatches", e) from e

    def submit_prepared(self, command_buffer: Any) -> None:
        """Submit a command buffer from :meth:`prepare` (once: WebGPU command buffers are single-use)."""
        self.counts["submit"] += 1
        try:
            self.queue.submit([command_buffer])
        except Exception as e:
            raise self.error("submitting a prepared pass", e) from e

    def submit_indexed(self, command_buffer: Any) -> int | None:
        """Submit one command buffer; returns its submission index for :meth:`read_submitted` (None
        where wgpu-native's C API is not reachable)."""
        self.counts["submit"] += 1
        if self._native is None:   # Dawn: a buffer's map waits for the submissions that used it
            self.queue.submit([command_buffer])
            return None
        ffi, _, libf, _ = self._native
        return int(libf.wgpuQueueSubmitForIndex(self.queue._internal, 1,
                                                ffi.new("WGPUCommandBuffer[1]", [command_buffer._internal])))

    def read_submitted(self, buffer: Any, nbytes: int, index: int | None) -> bytes:
        """The first ``nbytes`` of MAP_READ ``buffer`` once submission ``index`` is done, without
        waiting for later submissions.

        wgpu-py's ``map_sync`` resolves through a poll thread that calls ``wgpuDevicePoll(wait=True)``
        with no index, which waits for every queued submission: reading decode batch b also waited for
        batch b+1, and the GPU idled while the host encoded b+2 (a fraction of a millisecond per token).
        Here the map resolves on this thread by polling for ``index`` alone.
        """
        self.counts["read"] += 1
        if index is None:   # Dawn (submit_indexed gave None): its map waits for this buffer's last use only
            try:
                buffer.map_sync(1)   # MAP_READ; waits for all submitted work
                return bytes(buffer.read_mapped(0, nbytes))
            finally:
                if buffer.map_state != "unmapped":
                    buffer.unmap()
        ffi, lib, libf, from_view = self._native
        status: list[tuple[int, str]] = []

        @ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
        def mapped(st, message, _u1, _u2):
            status.append((st, from_view(message)))

        info = ffi.new("WGPUBufferMapCallbackInfo *")
        info.mode = lib.WGPUCallbackMode_AllowProcessEvents
        info.callback = mapped
        done = ffi.new("WGPUSubmissionIndex *", index)
        h = buffer._internal
        libf.wgpuBufferMapAsync(h, lib.WGPUMapMode_Read, 0, nbytes, info[0])
        try:
            libf.wgpuDevicePoll(self.device._internal, True, done)
            if not status:   # e.g. a lost device: settle everything; a map still unresolved is an error
                libf.wgpuDevicePoll(self.device._internal, True, ffi.NULL)
            if not status:
                raise RuntimeError(f"mapping buffer {buffer.label!r} did not resolve")
            if status[0][0] != lib.WGPUMapAsyncStatus_Success:
                raise RuntimeError(f"could not map buffer {buffer.label!r}: {status[0][1]}")
            return bytes(ffi.buffer(lib.wgpuBufferGetConstMappedRange(h, 0, nbytes), nbytes))
        finally:   # also on Ctrl-C: a mapped or pending buffer must not stay so
            if not status or status[0][0] == lib.WGPUMapAsyncStatus_Success:
                lib.wgpuBufferUnmap(h)

    def time(self, dispatches: Sequence[Dispatch], repeat: int = 20) -> float:
        """Seconds per run of ``dispatches``: wall time of ``repeat`` copies in one pass, after a warm-up."""
        self.submit(dispatches)
        self.sync()
        t0 = time.perf_counter()
        self.submit(list(dispatches) * repeat)
        self.sync()
        return (time.perf_counter() - t0) / repeat

    def time_passes(self, groups: Sequence[Sequence[Dispatch]]) -> list[float]:
        """GPU seconds of each group, each recorded as its own compute pass with timestamps at both ends,
        all in one submit (profiling: per-pass times exclude host encode/submit, so they attribute the
        GPU's share of a step to kernels). Needs the ``timestamp-query`` feature (:attr:`has_timestamps`)."""
        if not self.has_timestamps:
            raise DeviceError(f"{self.adapter.info['device']} has no timestamp-query feature")
        wgpu = self._wgpu
        per_set = _MAX_QUERIES // 2
        times: list[float] = []
        try:
            for start in range(0, len(groups), per_set):
                chunk = groups[start:start + per_set]
                n = 2 * len(chunk)
                qs = self.device.create_query_set(type="timestamp", count=n)
                buf = self.device.create_buffer(size=8 * n, usage=wgpu.BufferUsage.QUERY_RESOLVE
                                                | wgpu.BufferUsage.COPY_SRC)
                enc = self.device.create_command_encoder()
                for i, ds in enumerate(chunk):
                    self.encode(enc, ds, {"query_set": qs, "beginning_of_pass_write_index": 2 * i,
                                          "end_of_pass_write_index": 2 * i + 1})
                enc.resolve_query_set(qs, 0, n, buf, 0)
                self.queue.submit([enc.finish()])
                t = np.frombuffer(self.queue.read_buffer(buf), np.uint64).astype(np.int64)
                times += (np.maximum(t[1::2] - t[0::2], 0) * 1e-9).tolist()   # wgpu reports nanoseconds
                qs.destroy()
                buf.destroy()
        except Exception as e:
            raise DeviceError(f"timing {len(groups)} passes with timestamp queries failed: {e}") from e
        return times

    @contextmanager
    def binding_limit(self, nbytes: int) -> Iterator[None]:
        """Temporarily pretend storage bindings are capped at ``nbytes`` (tests of the split paths)."""
        old = self.max_storage_binding
        self.max_storage_binding = int(nbytes)
        try:
            yield
        finally:
            self.max_storage_binding = old


def workgroups_for(n_groups: int, max_dim: int = 65535) -> tuple[int, int, int]:
    """A 2-D grid with at least ``n_groups`` workgroups (one dimension is capped at 65535).

    Shaders recover the linear id as ``wid.y * nwg.x + wid.x`` and skip ids >= their count.
    """
    n_groups = max(1, int(n_groups))
    if n_groups <= max_dim:
        return (n_groups, 1, 1)
    y = -(-n_groups // max_dim)
    return (-(-n_groups // y), y, 1)


def pick_adapter(wgpu: Any, prefer: str) -> Any:
    """Best non-OpenGL adapter: discrete > integrated > virtual > CPU.

    wgpu falls back to an OpenGL (llvmpipe) adapter when no Vulkan/Metal/D3D12 driver is installed; it
    lacks shader-f16 and subgroups and runs compute badly, so it is refused with an install hint.
    """
    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
    except Exception as e:
        raise DeviceError(f"wgpu could not enumerate adapters ({e}); {_INSTALL_HINT}") from e
    usable = [a for a in adapters if a.info["backend_type"] not in _NOT_COMPUTE]
    if not usable:
        found = ", ".join(f"{a.info['device']} ({a.info['backend_type']})" for a in adapters) or "none"
        raise DeviceError(f"no Vulkan/Metal/D3D12 GPU adapter found (adapters: {found}); the OpenGL fallback "
                          f"lacks compute features oxigpu needs; {_INSTALL_HINT}")
    rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    if prefer == "low-power":
        rank = {"IntegratedGPU": 0, "DiscreteGPU": 1, "VirtualGPU": 2, "CPU": 3}
    return min(usable, key=lambda a: rank.get(a.info["adapter_type"], 4))
