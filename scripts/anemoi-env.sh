#!/usr/bin/env bash
# Make (once) a virtual environment with anemoi-datasets for the anemoi interoperability tests
# and print its python. anemoi-datasets 0.5.47 needs zarr <= 2.18.7 while wxstats runs on
# zarr 3, so it gets its own environment (no system site-packages; it needs no torch).
# About 850 MB and a minute and a half to build; cached under ~/.cache/wxstats.
set -euo pipefail
ANEMOI_VERSION="${ANEMOI_VERSION:-0.5.47}"
ENV_DIR="${WXSTATS_CACHE:-$HOME/.cache/wxstats}/anemoi-datasets-${ANEMOI_VERSION}"
if ! "$ENV_DIR/bin/python" -c "import anemoi.datasets, netCDF4, zarr" >/dev/null 2>&1; then
    echo "scripts/anemoi-env.sh: building the anemoi-datasets ${ANEMOI_VERSION} environment" \
        "(once, about a minute and a half) in $ENV_DIR" >&2
    rm -rf "$ENV_DIR"
    python -m venv "$ENV_DIR"
    "$ENV_DIR/bin/python" -m pip install -q "anemoi-datasets==${ANEMOI_VERSION}" "zarr<=2.18.7" \
        netCDF4 >&2 2> >(grep -v "Running pip as the 'root'" >&2)
    echo "scripts/anemoi-env.sh: built" >&2
else
    echo "scripts/anemoi-env.sh: anemoi-datasets ${ANEMOI_VERSION} environment cached in $ENV_DIR" >&2
fi
echo "$ENV_DIR/bin/python"
