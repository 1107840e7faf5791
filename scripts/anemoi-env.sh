#!/usr/bin/env bash
# The anemoi-datasets environment of the anemoi interoperability tests (scripts/cached-env.sh
# makes it once and prints its python). anemoi-datasets 0.5.47 needs zarr <= 2.18.7 while
# wxstats runs on zarr 3, so it gets its own environment (no system site-packages; it needs
# no torch). About 850 MB and a minute and a half to build.
set -euo pipefail
ANEMOI_VERSION="${ANEMOI_VERSION:-0.5.47}"
exec bash "$(dirname "$0")/cached-env.sh" "anemoi-datasets-${ANEMOI_VERSION}" \
    "import anemoi.datasets, anemoi.datasets.create, anemoi.datasets.commands, netCDF4, zarr" no \
    "anemoi-datasets==${ANEMOI_VERSION}" "zarr<=2.18.7" netCDF4
