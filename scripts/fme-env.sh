#!/usr/bin/env bash
# Make (once) a virtual environment with fme (ai2cm's ACE) for the ACE interoperability test
# and print its python. fme is pinned so the tier tests a known release; torch is pinned too
# and installed with it, as in neural-lam-env.sh: the environment sees the system
# site-packages (the CPU torch), but a bare "torch>=2.4" requirement resolved from inside a
# virtual environment would pull a multi-GB CUDA build. torch-harmonics (an fme dependency)
# comes as a source package and builds without its optional C++/CUDA kernels here (its build
# environment has no torch), which the normalization code does not use.
# WXSTATS_TORCH names the torch pin (scripts/test.sh sets it).
set -euo pipefail
FME_VERSION="${FME_VERSION:-2026.10.0}"
WXSTATS_TORCH="${WXSTATS_TORCH:-torch==2.13.0}"
ENV_DIR="${WXSTATS_CACHE:-$HOME/.cache/wxstats}/fme-${FME_VERSION}"
if ! "$ENV_DIR/bin/python" -c "import fme.core.normalizer" >/dev/null 2>&1; then
    echo "scripts/fme-env.sh: building the fme ${FME_VERSION} environment" \
        "(once, about a minute) in $ENV_DIR" >&2
    rm -rf "$ENV_DIR"
    # the base interpreter, also when this runs inside a venv: the env must not depend on it
    BASE_PYTHON="$(python -c 'import sys; print(sys._base_executable)')"
    "$BASE_PYTHON" -m venv --system-site-packages "$ENV_DIR"
    "$ENV_DIR/bin/python" -m pip install -q "$WXSTATS_TORCH" "fme==${FME_VERSION}" \
        >&2 2> >(grep -v "is ignored\|Running pip as the 'root'" >&2)
    echo "scripts/fme-env.sh: built" >&2
else
    echo "scripts/fme-env.sh: fme ${FME_VERSION} environment cached in $ENV_DIR" >&2
fi
echo "$ENV_DIR/bin/python"
