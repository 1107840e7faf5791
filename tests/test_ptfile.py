from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import torch

from wxstats.writers.ptfile import save_float32_vector


@pytest.mark.parametrize("n", [0, 1, 17, 255, 256, 70_000])
def test_torch_loads_what_torch_saves(tmp_path, n):
    values = np.random.default_rng(n).normal(1e5, 3.0, size=n)
    path = tmp_path / "v.pt"
    with open(path, "wb") as f:
        save_float32_vector(values, f)
    expected = io.BytesIO()
    torch.save(torch.from_numpy(values.astype(np.float32)), expected)
    expected.seek(0)
    reference = torch.load(expected, weights_only=True)
    for loaded in (
        torch.load(path, weights_only=True),
        torch.load(path, weights_only=True, mmap=True),
    ):
        assert isinstance(loaded, torch.Tensor)
        assert loaded.dtype == torch.float32 and tuple(loaded.shape) == (n,)
        assert loaded.is_contiguous() and not loaded.requires_grad
        assert torch.equal(loaded, reference)


def test_rejects_matrices(tmp_path):
    with pytest.raises(ValueError), open(tmp_path / "m.pt", "wb") as f:
        save_float32_vector(np.zeros((2, 2)), f)


def test_writing_does_not_import_torch(tmp_path):
    code = (
        "import sys, numpy as np\n"
        "from wxstats.writers.ptfile import save_float32_vector\n"
        f"save_float32_vector(np.arange(3.0), open({str(tmp_path / 'x.pt')!r}, 'wb'))\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert torch.equal(
        torch.load(tmp_path / "x.pt", weights_only=True), torch.arange(3, dtype=torch.float32)
    )
