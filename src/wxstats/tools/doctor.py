"""``wxstats doctor``: what a bug report needs to know about this machine.

Versions of wxstats and of every library it runs on (from the installed
distributions' metadata, so a broken import still shows its version), the
torch build (CPU or CUDA) and which collective backends it has, the launcher
this process would join (torchrun, Slurm) and the CPUs it may use. torch is
imported here only: every other command keeps it out of zarr/netCDF runs.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

from wxstats import __version__
from wxstats.core.machine import available_cpus
from wxstats.parallel.launch import detect_launch

LIBRARIES = (
    "numpy",
    "numba",
    "xarray",
    "zarr",
    "numcodecs",
    "netCDF4",
    "h5py",
    "isal",
    "pandas",
    "torch",
    "fsspec",
    "s3fs",
    "pyyaml",
    "rich",
    "matplotlib",
)


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _torch() -> dict[str, Any]:
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:  # noqa: BLE001 - a broken install is what we report
        return {"importable": False, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "importable": True,
        "build": f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU",
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl": dist.is_available() and dist.is_nccl_available(),
    }


def report() -> dict[str, Any]:
    """Everything ``doctor`` prints, as plain data."""
    found = detect_launch()
    launcher = (
        "none (one process)"
        if found is None
        else f"{found.launcher}: rank {found.rank} of {found.world_size}, master "
        f"{found.master_addr}:{found.master_port}"
    )
    return {
        "wxstats": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "cpus": available_cpus(),
        "libraries": {name: installed_version(name) for name in LIBRARIES},
        "torch": _torch(),
        "launcher": launcher,
        "kernel": _kernel(),
    }


def _kernel() -> dict[str, Any]:
    from wxstats.core.kernel import cache, stored

    try:
        return stored.stored()
    except Exception as exc:  # noqa: BLE001 - a broken install is what we report
        return {"folder": str(cache.store_dir()), "error": f"{type(exc).__name__}: {exc}"}


def format_report(info: dict[str, Any]) -> str:
    lines = [f"wxstats {info['wxstats']}", f"python {info['python']}"]
    lines += [f"platform {info['platform']}", f"cpus available {info['cpus']}"]
    for name, version in info["libraries"].items():
        lines.append(f"  {name:<12} {version or 'not installed'}")
    torch = info["torch"]
    if torch["importable"]:
        lines.append(
            f"torch build {torch['build']}, CUDA devices {torch['cuda_devices']}, "
            f"gloo {'yes' if torch['gloo'] else 'no'}, nccl {'yes' if torch['nccl'] else 'no'}"
        )
    else:
        from wxstats.parallel.devices import TORCH_EXTRA

        lines.append(
            f"torch cannot be imported: {torch['error']} (one process with threads needs "
            f"none; ranks do: {TORCH_EXTRA})"
        )
    lines.append(f"launcher {info['launcher']}")
    kernel = info["kernel"]
    held = ", ".join(kernel.get("this_machine", [])) or "none yet (the next run compiles it)"
    lines.append(f"compiled kernel stored in {kernel['folder']} for {held}")
    if "error" in kernel:
        lines.append(f"  cannot read it: {kernel['error']}")
    if "refused" in kernel:
        lines.append(f"  not used, someone else can change it: {kernel['refused']}")
    return "\n".join(lines)
