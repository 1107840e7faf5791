"""The ``.pt`` files written without torch are torch's own: the same bytes as
``torch.save`` of the same tensor (the installed torch is the reference), and
``torch.load(weights_only=True)`` gives back the values, dtype and shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from wxstats.io.formats.ptfile import NotATensor, tensor_bytes, tensor_values

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


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("n", [1, 17, 256, 70001])
def test_the_values_are_read_back_without_torch(n):
    """What torch.save writes of a 1-D tensor (ours, neural-lam's: float32 or
    float64, a view into a bigger storage, with a stride) reads back as
    torch.load gives it, without torch; torch's own files are the reference."""
    values = np.random.default_rng(n).standard_normal(n)
    for tensor in (
        torch.from_numpy(values.astype(np.float32)),
        torch.from_numpy(values),
        torch.from_numpy(values.astype(np.float32))[1:][::2],  # offset and stride
        torch.from_numpy(values).reshape(1, -1)[0],
    ):
        got = tensor_values(_saved(tensor))
        assert got.dtype == np.float64
        assert got.tobytes() == tensor.to(torch.float64).numpy().tobytes()
    ours = values.astype(np.float32)
    assert tensor_values(tensor_bytes(ours)).tobytes() == ours.astype(np.float64).tobytes()


@pytest.mark.parametrize(
    "obj, why",
    [
        (torch.zeros(2, 3), "not 1-D"),
        ({"mean": torch.zeros(3)}, "not a tensor"),
        ([1.0, 2.0], "not a tensor"),
        (torch.zeros(3, dtype=torch.bool), "names torch.BoolStorage"),
    ],
)
def test_what_is_not_a_1d_tensor_is_refused(obj, why):
    with pytest.raises(NotATensor, match=why):
        tensor_values(_saved(obj))
    with pytest.raises(NotATensor, match="not a torch.save archive"):
        tensor_values(b"not a zip")


def test_a_compressed_record_is_refused_unread():
    """torch.save stores its records uncompressed; a deflated one (a few KB that
    would inflate to GBs: a zip bomb) is refused before any record is read."""
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02.")
        archive.writestr("archive/data/0", bytes(64 << 20))  # 64 MiB of zeros: ~64 KB stored
    assert len(buf.getvalue()) < 1 << 20
    with pytest.raises(NotATensor, match="compressed record"):
        tensor_values(buf.getvalue())
