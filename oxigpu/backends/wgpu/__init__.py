"""The wgpu (WebGPU) backend: device layer, kernel protocol, the op kernels and the Plan runner."""
from __future__ import annotations

from ..._runtime_dir import ensure_runtime_dir
from .backend import WgpuBackend, auto_backend
from .device import Device, Dispatch, Params, workgroups_for

# Before any WebGPU library loads (device.py imports it on first use): the Vulkan driver's display probe
# reads XDG_RUNTIME_DIR and prints a warning per probe without it (see _runtime_dir).
ensure_runtime_dir()

__all__ = ["Device", "Dispatch", "Params", "WgpuBackend", "auto_backend", "workgroups_for"]
