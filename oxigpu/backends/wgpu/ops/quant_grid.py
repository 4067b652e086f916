"""The lookup tables of the IQ weight types on the GPU (the IQ1/IQ2/IQ3 grids, the IQ4 codebook): one small
storage buffer per table and device, bound at ``GRID_BINDING`` by every kernel that dequantizes such a type
(``shaders/common/iq_grid.wgsl`` says why a buffer and not a constant array)."""
from __future__ import annotations

import threading
import weakref
from typing import Any

from ....quant import get_type
from ....quant.iquants import TABLE_TYPES, table_words
from ..device import Device

GRID_BINDING = 14
"""Must match shaders/common/iq_grid.wgsl."""

_SHARED = {"IQ1_M": "IQ1_S", "IQ4_XS": "IQ4_NL"}
"""Types reading another type's grid."""

_GRIDS: weakref.WeakKeyDictionary[Device, dict[str, Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def has_grid(qtype: str) -> bool:
    """Whether kernels over ``qtype`` bind a lookup table."""
    return get_type(qtype).name in TABLE_TYPES


def grid_binds(dev: Device, qtype: str) -> dict[int, Any]:
    """``{GRID_BINDING: buffer}`` for a table type (uploaded once per device), ``{}`` for any other: merge
    it into the bindings of the dispatches whose shader includes the type's ``quant/<type>.wgsl``.
    Locked: kernels are built on several threads at load."""
    name = get_type(qtype).name
    if name not in TABLE_TYPES:
        return {}
    name = _SHARED.get(name, name)
    with _LOCK:
        grids = _GRIDS.setdefault(dev, {})
        if name not in grids:
            grids[name] = dev.upload(table_words(name), label=f"{name.lower()} table")
        return {GRID_BINDING: grids[name]}
