"""The wgpu (WebGPU) backend: device layer, kernel protocol, the op kernels and the Plan runner."""
from __future__ import annotations

from .backend import WgpuBackend, auto_backend
from .device import Device, Dispatch, Params, workgroups_for

__all__ = ["Device", "Dispatch", "Params", "WgpuBackend", "auto_backend", "workgroups_for"]
