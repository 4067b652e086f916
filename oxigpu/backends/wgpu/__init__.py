"""The wgpu (WebGPU) backend: device layer, kernel protocol and the op kernels."""
from __future__ import annotations

from .device import Device, Dispatch, Params, workgroups_for

__all__ = ["Device", "Dispatch", "Params", "workgroups_for"]
