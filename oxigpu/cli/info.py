"""`oxigpu info`: what a GGUF file holds — architecture, hyperparameters, tokenizer, tensor types — and,
with ``--device``, the GPU adapter (name, backend, type, features, limits)."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from ..errors import GGUFError, ModelNotFoundError, OxigpuError, UnsupportedArchitectureError
from ..gguf import GGUFFile
from ..model_packages import MODELS
from ..models.hparams import HParams


def model_info(path: str | Path) -> dict[str, Any]:
    """A JSON-ready summary of the model file at `path` (raises OxigpuError on a missing or bad file)."""
    path = Path(path)
    if not path.exists():
        from ..hub import download, parse_ref
        ref = parse_ref(str(path))
        if ref is None:
            raise ModelNotFoundError(f"no model file at {path}")
        path = download(ref)      # a Hub name: org/repo:QUANT or org/repo/file.gguf
    with GGUFFile(path) as f:
        meta = f.metadata
        arch = f.arch
        try:
            hparams: dict[str, Any] | None = HParams.from_gguf(f).to_dict()
            unsupported = None
        except (UnsupportedArchitectureError, GGUFError) as e:   # still describe what the file holds
            hparams, unsupported = None, str(e)
        types: dict[str, dict[str, int]] = defaultdict(lambda: {"count": 0, "bytes": 0})
        for t in f.tensors.values():
            types[t.type_name]["count"] += 1
            types[t.type_name]["bytes"] += t.nbytes
        tokens = meta.get("tokenizer.ggml.tokens")
        merges = meta.get("tokenizer.ggml.merges")
        return {
            "path": str(path),
            "file_bytes": path.stat().st_size,
            "gguf_version": f.version,
            "architecture": arch,
            "name": meta.get("general.name"),
            "file_type": meta.get("general.file_type"),
            "supported": unsupported is None,
            "unsupported_reason": unsupported,
            "hparams": hparams,
            "tokenizer": {
                "model": meta.get("tokenizer.ggml.model"),
                "pre": meta.get("tokenizer.ggml.pre"),
                "vocab_size": len(tokens) if tokens is not None else None,
                "merges": len(merges) if merges is not None else None,
                "bos": meta.get("tokenizer.ggml.bos_token_id"),
                "eos": meta.get("tokenizer.ggml.eos_token_id"),
                "eot": meta.get("tokenizer.ggml.eot_token_id"),
                "add_bos": meta.get("tokenizer.ggml.add_bos_token"),
                "chat_template": "tokenizer.chat_template" in meta,
            },
            "n_tensors": len(f.tensors),
            "n_params": sum(t.n_elements for t in f.tensors.values()),
            "tensor_types": dict(sorted(types.items(), key=lambda kv: -kv[1]["bytes"])),
        }


def _format(info: dict[str, Any]) -> str:
    lines = [f"{info['path']}: {info['architecture']}"
             + (f" ({info['name']})" if info["name"] else "")
             + f", GGUF v{info['gguf_version']}, {info['file_bytes']:,} bytes ({info['file_bytes'] / 2**20:.1f} MiB)"]
    if info["hparams"] is None:
        lines.append(f"  not runnable: {info['unsupported_reason']}")
    else:
        lines.append("hyperparameters:")
        lines += [f"  {k:<22} {v}" for k, v in info["hparams"].items() if k != "arch"]
    tok = info["tokenizer"]
    lines.append("tokenizer:")
    lines += [f"  {k:<22} {v}" for k, v in tok.items()]
    lines.append(f"tensors: {info['n_tensors']}, {info['n_params']:,} parameters")
    for name, t in info["tensor_types"].items():
        lines.append(f"  {name:<8} {t['count']:>5} tensors {t['bytes']:>16,} bytes")
    return "\n".join(lines)


@click.command("info")
@click.argument("model", required=False, type=click.Path(dir_okay=True))
@click.option("--device", "device", is_flag=True,
              help="Describe the GPU adapter the wgpu backend would use (no model needed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def info(model: str | None, device: bool, as_json: bool) -> None:
    """Show what the GGUF file MODEL (or a packaged model, by name: oxigpu models) holds, and/or (--device)
    the GPU adapter."""
    if model is None and not device:
        raise click.UsageError("give a MODEL file (or a packaged model's name), --device, or both")
    try:
        if model is not None and model in MODELS and not Path(model).exists():
            model = str(MODELS[model].locate(lambda line: click.echo(line, err=True)))
        data = {**({"device": device_info()} if device else {}), **(model_info(model) if model else {})}
    except OxigpuError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps(data, indent=2, default=_jsonable))
        return
    text = [_format_device(data["device"])] if device else []
    click.echo("\n".join(text + ([_format(data)] if model else [])))


def device_info() -> dict[str, Any]:
    """The adapter wgpu runs on (``Device.info()``); DeviceError, with an install hint, when there is none."""
    from ..backends.wgpu.device import Device
    return Device.get().info()


def _format_device(d: dict[str, Any]) -> str:
    lines = [f"device: {d['name']} ({d['vendor']}), backend {d['backend']}, type {d['adapter_type']}"
             + (f", {d['description']}" if d["description"] else ""),
             f"  WebGPU implementation {d['webgpu']} (OXIGPU_WEBGPU); prefill GEMM on the matrix units: "
             f"{'yes' if d['mma'] else 'no'} (OXIGPU_MMA); bounds-checked shaders: "
             f"{'yes' if d['robust'] else 'no'} (OXIGPU_ROBUST)",
             f"  max storage binding {d['max_storage_binding']:,} bytes; decode GEMVs: "
             f"{'int8 x, integer dots' if d['int8_dots'] else 'float dots'} (OXIGPU_INT8_DOTS)",
             f"features: {', '.join(d['features']) or 'none'}", "limits:"]
    w = max(map(len, d["limits"]), default=0)
    lines += [f"  {k:<{w}} {v:,}" if isinstance(v, int) else f"  {k:<{w}} {v}" for k, v in sorted(d["limits"].items())]
    return "\n".join(lines)


def _jsonable(v: Any) -> Any:
    """numpy scalars from the metadata reader."""
    return v.item() if hasattr(v, "item") else str(v)
