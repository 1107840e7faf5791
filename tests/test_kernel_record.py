"""The kernel's argument record (wxstats.core.kernel.record) follows the reduction
table: every declared quantity has a lane accumulator and a slot in one of the
record's output arrays, and the stored entry's C layout is generated from the
same fields. (That the compiled kernel given this record sums the same bits as
the numpy twin is tests/test_kernels.py's and tests/test_statistics.py's.)"""

from __future__ import annotations

import numpy as np
import pytest

from wxstats.core import reduction
from wxstats.core.kernel import record


def _args(dtype=np.float32, **changed) -> record.KernelArgs:
    n_t, n_g, n_c, m = 3, 10, 2, 4
    fields = {
        "values": np.zeros((n_t, n_g * n_c), dtype=dtype),
        "lags": np.array([1], dtype=np.int64),
        "ranges": np.array([[0, 3], [1, 3]], dtype=np.int64),
        "refs": np.zeros((2, 3, n_t, m * n_c)),
        "weights": np.empty(0),
        "by": np.zeros(n_t, dtype=np.int64),
        "n_c": n_c,
        "m": m,
        "chunk": 512,
    }
    fields |= reduction.kernel_arrays(2, n_t, n_c)
    return record.KernelArgs(**(fields | changed))


def test_every_quantity_has_a_lane_and_an_output_slot():
    names = [q.name for q in reduction.QUANTITIES]
    assert list(record.Lanes._fields) == names
    assert list(record.Powers._fields) == [q.name for q in reduction.POWERS]
    outputs = {f.name for f in record.OUTPUTS}
    assert outputs == set(reduction.ARRAYS)
    for name in names:
        array, i = reduction.slot(name)
        assert array in record.KernelArgs._fields
        assert i < len(reduction.ARRAYS[array])


def test_the_c_layout_lists_every_array_and_its_shape_in_declaration_order():
    args = _args()
    scratch = (np.empty(7), np.empty(3, dtype=np.int64), np.empty(4, dtype=np.float32))
    arrays, dims = record.c_layout(args, scratch)
    declared = [f.name for f in record.INPUTS + record.OUTPUTS]
    assert [id(x) for x in arrays] == [id(getattr(args, n)) for n in declared] + [
        id(x) for x in scratch
    ]
    shapes = [d for n in declared for d in getattr(args, n).shape]
    assert dims.tolist() == shapes + [args.n_c, args.m, args.chunk, 7, 3, 4]
    source = record.c_entry_source()
    for i, name in enumerate(declared):
        assert f"{name} = carray(pointers[{i}]" in source


def test_a_wrong_array_is_refused_naming_its_field():
    record.check(_args())
    with pytest.raises(ValueError, match="kernel argument lags of int32"):
        record.check(_args(lags=np.array([1], dtype=np.int32)))
    with pytest.raises(ValueError, match="kernel argument refs"):
        record.check(_args(refs=np.zeros((2, 3, 8, 3)).transpose(0, 1, 3, 2)))
