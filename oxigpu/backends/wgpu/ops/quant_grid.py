"""The lookup grids of the IQ1/IQ2/IQ3 weight types on the GPU: one small storage buffer per grid and
device, bound at ``GRID_BINDING`` by every kernel that dequantizes such a type (``shaders/common/iq_grid.wgsl``
says why a buffer and not a constant array)."""
from __future__ import annotations

import threading
import weakref
from typing import Any

from ....quant import get_type
from ....quant.iquants import GRID_TYPES, grid_words
from ..device import Device

GRID_BINDING = 14
"""Must match shaders/common/iq_grid.wgsl."""

_SHARED = {"IQ1_M": "IQ1_S"}
"""Types reading another type's grid."""

_GRIDS: "weakref.WeakKeyDictionary[Device, dict[str, Any]]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def has_grid(qtype: str) -> bool:
    return get_type(qtype).name in GRID_TYPES


def grid_binds(dev: Device, qtype: str) -> dict[int, Any]:
    """``{GRID_BINDING: buffer}`` for a grid type (uploaded once per device), ``{}`` for any other: merge
    it into the bindings of the dispatches whose shader includes the type's ``quant/<type>.wgsl``.
    Locked: kernels are built on several threads at load."""
    name = get_type(qtype).name
    if name not in GRID_TYPES:
        return {}
    name = _SHARED.get(name, name)
    with _LOCK:
        grids = _GRIDS.setdefault(dev, {})
        if name not in grids:
            grids[name] = dev.upload(grid_words(name), label=f"{name.lower()} grid")
        return {GRID_BINDING: grids[name]}
