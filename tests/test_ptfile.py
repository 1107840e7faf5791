"""The ``.pt`` files written without torch are torch's own: the same bytes as
``torch.save`` of the same tensor (the installed torch is the reference), and
``torch.load(weights_only=True)`` gives back the values, dtype and shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from wxstats.io.formats.ptfile import tensor_bytes

# the pickle's integer opcodes change at 256 and 65536 values; zip padding with every size
SIZES = [1, 2, 17, 255, 256, 300, 65535, 65536, 70001]


def _torch_save(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    torch.save(torch.from_numpy(values), buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("n", SIZES)
def test_the_bytes_are_torch_saves(n):
    values = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    assert tensor_bytes(values) == _torch_save(values)


def test_torch_load_gives_the_values_back(tmp_path):
    values = np.array([1e5, -0.0, 3.5e-38, np.inf, np.nan, 280.25], dtype=np.float32)
    path = tmp_path / "x.pt"
    path.write_bytes(tensor_bytes(values))
    tensor = torch.load(path, map_location="cpu", weights_only=True)
    assert isinstance(tensor, torch.Tensor)
    assert tensor.dtype == torch.float32 and tuple(tensor.shape) == (6,)
    assert tensor.is_contiguous() and tensor.stride() == (1,)
    assert tensor.numpy().tobytes() == values.tobytes()


@pytest.mark.parametrize(
    "values", [np.zeros(3), np.zeros((2, 2), np.float32), np.zeros(0, np.float32)]
)
def test_other_arrays_are_refused(values):
    with pytest.raises(TypeError):
        tensor_bytes(values)
