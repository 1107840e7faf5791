"""Which backend and device a rank uses (``--backend``, ``--device``), checked
before any rank waits for another: a node with fewer GPUs than ranks is refused
on all of them at once (``--nproc``: before starting any)."""

from __future__ import annotations

from wxstats.core.errors import WxstatsError
from wxstats.parallel.launch import Launch


def resolve_backend(backend: str, device: str, launch: Launch) -> tuple[str, str]:
    """(backend, device) from ``--backend auto|gloo|nccl`` and ``--device auto|cpu|cuda``:
    CUDA when asked, or on ``auto`` when there is a GPU for every local rank.

    A node with fewer GPUs than local ranks is refused on every rank of the node,
    not only on those without one: the others would wait for them until the
    timeout."""
    import torch

    cuda = torch.cuda.is_available()
    needed = max(launch.local_world_size, launch.local_rank + 1)
    if device == "auto":
        use_cuda = cuda and torch.cuda.device_count() >= needed
        if backend == "gloo":
            use_cuda = False
        device = "cuda" if use_cuda or backend == "nccl" else "cpu"
    if device == "cuda":
        if not cuda:
            raise WxstatsError("--device cuda: no CUDA device is available to this process")
        count = torch.cuda.device_count()
        if count < needed:
            raise WxstatsError(
                f"--device cuda: local rank {count} has no GPU ({count} visible for "
                f"{needed} ranks on this node); start at most one rank per GPU"
            )
        device = f"cuda:{launch.local_rank}"
    if backend == "auto":
        backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl" and not device.startswith("cuda"):
        raise WxstatsError("--backend nccl needs --device cuda (NCCL reduces GPU tensors)")
    return backend, device


def check_local_devices(backend: str, device: str, nproc: int) -> None:
    """``--nproc``: refuse a device choice that cannot work before any rank starts
    (each would say so, and the launcher would import torch for nothing otherwise:
    only an explicit CUDA or NCCL can fail)."""
    if device == "cuda" or backend == "nccl":
        resolve_backend(backend, device, Launch("nproc", 0, nproc, 0, nproc, "127.0.0.1", 0))


TORCH_EXTRA = "pip install 'wxstats[torch]'"
"""What installs the ranks' library: torch is an extra, the base install computes
everything in one process with threads (on a machine without a GPU, PyTorch's
CPU build first: README)."""


def require_torch(what: str) -> None:
    """Refuse ``what`` (``--nproc 4``, ``a torchrun rank``...) in one line where torch
    is not installed: ranks exchange their sums through ``torch.distributed``.
    Checked by the import system's finder, without importing torch (seconds)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        found = False
    if not found:
        raise WxstatsError(
            f"{what} needs PyTorch (ranks exchange their sums through torch.distributed), "
            f"which is not installed: {TORCH_EXTRA}; without it wxstats computes in one "
            "process with threads (--threads)"
        )
