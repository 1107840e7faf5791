#!/usr/bin/env bash
# Make (once) a virtual environment with neural-lam for the interoperability tests and print
# its python. neural-lam is pinned so the tier tests a known release. torch is pinned too and
# installed with it: the environment sees the system site-packages, which hold the CPU torch
# when the tests run in the base interpreter, but not when they run inside a virtual
# environment (a venv's own packages are not "system" ones), and a bare torch requirement
# would then pull a multi-GB CUDA build. WXSTATS_TORCH names the pin (scripts/test.sh sets it).
set -euo pipefail
NEURALLAM_VERSION="${NEURALLAM_VERSION:-0.7.0}"
WXSTATS_TORCH="${WXSTATS_TORCH:-torch==2.13.0}"
ENV_DIR="${WXSTATS_CACHE:-$HOME/.cache/wxstats}/neural-lam-${NEURALLAM_VERSION}"
if ! "$ENV_DIR/bin/python" -c "import neural_lam" >/dev/null 2>&1; then
    echo "scripts/neural-lam-env.sh: building the neural-lam ${NEURALLAM_VERSION} environment" \
        "(once, about a minute) in $ENV_DIR" >&2
    rm -rf "$ENV_DIR"
    # the base interpreter, also when this runs inside a venv: the env must not depend on it
    BASE_PYTHON="$(python -c 'import sys; print(sys._base_executable)')"
    "$BASE_PYTHON" -m venv --system-site-packages "$ENV_DIR"
    "$ENV_DIR/bin/python" -m pip install -q "$WXSTATS_TORCH" "neural-lam==${NEURALLAM_VERSION}" \
        >&2 2> >(grep -v "is ignored\|Running pip as the 'root'" >&2)
    echo "scripts/neural-lam-env.sh: built" >&2
else
    echo "scripts/neural-lam-env.sh: neural-lam ${NEURALLAM_VERSION} environment cached in $ENV_DIR" >&2
fi
echo "$ENV_DIR/bin/python"
