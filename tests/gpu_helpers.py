"""Helpers for tests that run kernels as on an adapter without some feature."""
from __future__ import annotations

from oxigpu.backends.wgpu.device import Device


def without_subgroups(monkeypatch) -> None:
    """Run as on an adapter without subgroups: ``has_subgroups`` and what the device derives from it (cached
    per device: the narrowest subgroup, matrix units), so a GPU whose subgroups span a head takes the paths
    such an adapter takes, not only lavapipe."""
    monkeypatch.setattr(Device, "has_subgroups", property(lambda self: False))
    monkeypatch.setattr(Device, "subgroup_min_size", property(lambda self: 0))
    monkeypatch.setattr(Device, "has_mma", property(lambda self: False))
