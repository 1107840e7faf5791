"""The examples and notes each command's ``--help`` ends with."""

COMPUTE_EPILOG = """\
examples:
  wxstats compute data/meps.datastore.yaml
  wxstats compute data/meps.datastore.yaml --split train --step-length 3 --summary stats.json
  wxstats compute data/meps.datastore.yaml --overwrite --level-weights 2=1,0=0.1,65=0.065
  wxstats compute era5.zarr --split train=2019-03-01/2019-03-20 --split val=2019-03-21/2019-03-31
  wxstats compute era5.nc --split train=2019-03-01T00:00/2019-03-20T23:00 --diff-steps 1,3,6
  wxstats compute 'era5_*.nc' --variables t2m,z --feature-dims level --summary stats.json
  wxstats compute danra.zarr --write-into      # mllam-data-prep store: replace its statistics
  wxstats compute data/meps.datastore.yaml --checkpoint ck/   # killed? add --resume

outputs (neural-lam MEPS datastore): <datastore dir>/static/parameter_mean.pt,
parameter_std.pt, diff_mean.pt, diff_std.pt, flux_stats.pt, parameter_weights.npy
and wxstats_stats.nc (all statistics in float64, self-describing).
outputs (zarr/netCDF): --output FILE.nc with {variable}__{split}__{op} like
mllam-data-prep (default ./<dataset>.stats.nc), --summary FILE.json, --write-into.
"""

EXAMPLE_EPILOG = """\
examples:
  wxstats example                 # writes ./wxstats-example and computes its statistics
  wxstats example /tmp/meps --times 6 --grid 64 80
"""

REPORT_EPILOG = """\
examples:
  wxstats report data/static/wxstats_stats.nc -o report/   # our statistics file
  wxstats report stats.json                                # a --summary JSON
  wxstats report data/static                               # a neural-lam static/ folder
  wxstats report dataset.zarr --split train                # an mllam-data-prep zarr
  wxstats report years.nc --last-years 3 -o drift/         # compute --by year: drift

writes DIR/wxstats_report.png and DIR/wxstats_report.html (self-contained, the
figure inlined), replacing an earlier report there; prints the warnings found.
Per-year statistics (compute --by year) also get DIR/wxstats_drift.png (per year
and cumulative mean and std of every variable) and a drift table, printed too.
"""

COMPARE_EPILOG = """\
examples:
  wxstats compare old/static/wxstats_stats.nc new/static/wxstats_stats.nc
  wxstats compare data/static data/static/wxstats_stats.nc --rtol 1e-6
  wxstats compare dataset.zarr data/static --rtol 1e-3

A and B may each be a wxstats .nc or .json, a neural-lam static/ folder (names
from the datastore YAML beside it) or an mllam-data-prep zarr. Variables are
matched by name (by position, with a warning, when one side has no names).
exit status: 0 same within --rtol, 1 different, 2 unreadable input.
"""

INSPECT_EPILOG = """\
examples:
  wxstats inspect data/meps.datastore.yaml
  wxstats inspect data/meps.datastore.yaml --split val --threads 16
  wxstats inspect data/meps.datastore.yaml --nodes 8 --storage-gbps 20

Reads only the first sample (twice: a raw read and one timed computation) to
measure this machine; writes nothing.
"""
