#!/usr/bin/env bash
# Make (once) a virtual environment with neural-lam for the interoperability tests and print
# its python. It sees the system site-packages, so it reuses the installed CPU build of torch
# instead of pulling a CUDA build; neural-lam is pinned so the tier tests a known release.
set -euo pipefail
NEURALLAM_VERSION="${NEURALLAM_VERSION:-0.7.0}"
ENV_DIR="${WXSTATS_CACHE:-$HOME/.cache/wxstats}/neural-lam-${NEURALLAM_VERSION}"
if ! "$ENV_DIR/bin/python" -c "import neural_lam" >/dev/null 2>&1; then
    rm -rf "$ENV_DIR"
    python -m venv --system-site-packages "$ENV_DIR"
    "$ENV_DIR/bin/python" -m pip install -q "neural-lam==${NEURALLAM_VERSION}" >&2 2> >(grep -v "is ignored" >&2)
fi
echo "$ENV_DIR/bin/python"
