from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import torch

from reference import assert_close, meps_reference
from wxstats.cli import main


def test_example_end_to_end(tmp_path, capsys):
    assert main(["example", str(tmp_path / "ex"), "--times", "2", "--grid", "10", "12"]) == 0
    out = capsys.readouterr().out
    assert "pres_0g" in out and "z_500" in out and "toa_downwelling_shortwave_flux" in out
    static = tmp_path / "ex" / "static"
    ref = meps_reference(tmp_path / "ex" / "meps.datastore.yaml")
    mean = torch.load(static / "parameter_mean.pt", weights_only=True)
    assert_close(mean.numpy(), ref["mean"], 1e-7, "float32 mean")  # float32 rounding only


def test_existing_outputs_are_not_replaced_without_overwrite(meps_copy, capsys):
    assert main(["compute", str(meps_copy), "--quiet"]) == 0
    std_file = meps_copy.parent / "static" / "parameter_std.pt"
    before = std_file.read_bytes()
    x_path = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[0]
    x = np.load(x_path)
    x *= 1.5
    np.save(x_path, x)
    assert main(["compute", str(meps_copy), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "parameter_mean.pt" in err and "--overwrite" in err
    assert std_file.read_bytes() == before
    assert main(["compute", str(meps_copy), "--quiet", "--overwrite"]) == 0
    assert std_file.read_bytes() != before


def test_summary_schema_and_exact_floats(meps_small, tmp_path):
    out = tmp_path / "out"
    summary_path = tmp_path / "s.json"
    assert (
        main(
            [
                "compute",
                str(meps_small),
                "--quiet",
                "--output-dir",
                str(out),
                "--summary",
                str(summary_path),
            ]
        )
        == 0
    )
    summary = json.loads(summary_path.read_text())
    ref = meps_reference(meps_small)
    assert set(summary) >= {"variables", "state", "diff", "forcing", "run"}
    assert len(summary["variables"]) == 17
    assert set(summary["state"]) >= {"count", "mean", "std", "min", "max"}
    assert set(summary["diff"]) == {"3"}
    assert_close(summary["state"]["mean"], ref["mean"], 1e-10, "mean")
    assert_close(summary["diff"]["3"]["std"], ref["diff_std"], 1e-10, "diff std (raw scale)")
    flux = summary["forcing"]["toa_downwelling_shortwave_flux"]
    assert flux["count"] == ref["flux"][0]
    assert_close([flux["mean"], flux["std"]], ref["flux"][1:], 1e-10, "flux")
    assert {"world_size", "wxstats_version", "host"} <= set(summary["run"])
    assert "host" not in json.dumps({k: v for k, v in summary.items() if k != "run"})


def test_python_dash_m_and_help():
    result = subprocess.run(
        [sys.executable, "-m", "wxstats", "compute", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--step-length" in result.stdout and "examples:" in result.stdout


def test_level_weights_option(meps_small, tmp_path):
    out = tmp_path / "o"
    weights = "2=1,0=0.5,65=0.065,1000=0.1,850=0.05,500=0.25"
    assert (
        main(
            [
                "compute",
                str(meps_small),
                "--quiet",
                "--output-dir",
                str(out),
                "--level-weights",
                weights,
            ]
        )
        == 0
    )
    w = np.load(out / "parameter_weights.npy")
    assert w.dtype == np.float32 and w[0] == np.float32(0.5) and w[-1] == np.float32(0.25)


def test_unknown_level_is_a_clear_error(meps_small, tmp_path, capsys):
    assert (
        main(
            [
                "compute",
                str(meps_small),
                "--quiet",
                "--output-dir",
                str(tmp_path / "o"),
                "--level-weights",
                "2=1",
            ]
        )
        == 2
    )
    assert "pres_0g" in capsys.readouterr().err
    assert not (tmp_path / "o" / "parameter_mean.pt").exists()


def test_a_full_disk_while_writing_leaves_the_previous_outputs_intact(
    meps_copy, monkeypatch, capsys
):
    import errno

    static = meps_copy.parent / "static"
    assert main(["compute", str(meps_copy), "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in static.iterdir()}
    from wxstats.io.formats import neurallam

    real_writer = neurallam._tensor_writer
    calls = []

    def filling_the_disk(values):
        write = real_writer(values)

        def half_then_full(path):
            calls.append(1)
            if len(calls) == 3:  # the third .pt file: half written, then the disk is full
                path.write_bytes(b"half a tensor")
                raise OSError(errno.ENOSPC, "No space left on device")
            write(path)

        return half_then_full

    monkeypatch.setattr(neurallam, "_tensor_writer", filling_the_disk)
    assert main(["compute", str(meps_copy), "--quiet", "--overwrite", "--step-length", "1"]) == 2
    err = capsys.readouterr().err
    assert "diff_mean.pt: no space left on " in err and "Nothing was written or replaced" in err
    assert "Traceback" not in err
    assert {p.name: p.read_bytes() for p in static.iterdir()} == before  # no temporary files


def test_output_into_a_closed_pipe_ends_quietly(meps_small, tmp_path):
    """`wxstats compare A B | head`: no BrokenPipeError traceback when the reader has gone."""
    out = tmp_path / "o"
    assert main(["compute", str(meps_small), "--quiet", "--output-dir", str(out)]) == 0
    stats = str(out / "wxstats_stats.nc")
    result = subprocess.run(
        f"{sys.executable} -m wxstats compare {stats} {stats} --rtol 0 | true",
        shell=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


def test_a_zarr_run_imports_neither_torch_nor_dask(tmp_path):
    """Start-up: a one-process zarr/netCDF run needs no torch (seconds to import)
    and blocks dask, which xarray would import only to ask about array types."""
    import json
    import subprocess
    import sys

    import xarray as xr
    from distributed_helpers import env
    from gridded_data import gridded, write_zarr

    ds, truth = gridded(n_time=8)
    write_zarr(ds, tmp_path / "g.zarr")
    out = tmp_path / "s.nc"
    probe = (
        "import atexit, json, runpy, sys\n"
        "atexit.register(lambda: print('MODULES' + json.dumps("
        "{m: sys.modules.get(m) is not None for m in ('torch', 'dask', 'xarray')})))\n"
        f"sys.argv = ['wxstats', 'compute', {str(tmp_path / 'g.zarr')!r}, '--output', "
        f"{str(out)!r}, '--quiet']\n"
        "runpy.run_module('wxstats', run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env(), timeout=300
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.split("MODULES", 1)[1])
    assert loaded == {"torch": False, "dask": False, "xarray": True}
    with xr.open_dataset(out) as stats:
        assert np.isclose(float(stats["t2m__train__mean"]), truth["t2m"].mean(), rtol=1e-12)


def test_warnings_once_each_and_quiet_keeps_only_wxstats_own(capsys):
    import os

    import wxstats
    from wxstats.cli import _WarningLines

    inside = os.path.join(os.path.dirname(wxstats.__file__), "sources", "meps.py")
    outside = "/usr/lib/python3/site-packages/zarr/core.py"
    for quiet, expected in ((False, ["data note", "library note"]), (True, ["data note"])):
        show = _WarningLines(quiet)
        for _ in range(3):
            show(UserWarning("data note"), UserWarning, inside, 1)
            show(UserWarning("library note"), UserWarning, outside, 1)
        lines = capsys.readouterr().err.splitlines()
        assert lines == [f"wxstats: warning: {text}" for text in expected]


def test_a_command_leaves_the_callers_warning_display_alone(meps_small, tmp_path):
    import warnings

    before = (warnings.showwarning, warnings.formatwarning, list(warnings.filters))
    out = tmp_path / "o"
    assert main(["compute", str(meps_small), "--quiet", "--output-dir", str(out)]) == 0
    assert (warnings.showwarning, warnings.formatwarning, list(warnings.filters)) == before


def test_the_command_skips_numbas_blas_probe_and_leaves_scipy_usable(tmp_path):
    """The ``wxstats`` command keeps numba from importing scipy's BLAS module (its
    probe: 0.15-0.3 s of every run that loads the compiled kernel), and a later
    import of that module reaches its loader again. A stand-in scipy, first on the
    path, records each import of it: the same test whether scipy is installed or not."""
    import os
    import subprocess
    import sys

    from distributed_helpers import env

    fake = tmp_path / "fake" / "scipy"
    (fake / "linalg").mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "1.14.0"\n')
    (fake / "linalg" / "__init__.py").write_text("")
    marker = tmp_path / "blas-imported"
    (fake / "linalg" / "cython_blas.py").write_text(
        f"open({str(marker)!r}, 'a').write('imported\\n')\n"
        "raise ImportError('a stand-in: no BLAS here')\n"
    )
    script = f"""
import os, sys, numpy as np
from wxstats.cli import process
from wxstats.core import kernel
process.tune_for_one_command()  # what the command's process takes (wxstats.cli.console)
a = np.ones((2, 40000, 4), np.float32)
kernel.block_sums(kernel.Block(a, np.arange(4), (0, 2)))
print("probe imported:", os.path.exists({str(marker)!r}))
try:
    import scipy.linalg.cython_blas
except ImportError as exc:
    print("later import:", exc)
"""
    environment = env()
    environment["PYTHONPATH"] = os.pathsep.join([str(fake.parent), environment["PYTHONPATH"]])
    out = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "probe imported: False" in out.stdout, out.stdout
    assert "later import: a stand-in: no BLAS here" in out.stdout, out.stdout
    assert marker.read_text() == "imported\n"  # only the later import ran its loader
