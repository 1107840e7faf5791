#!/usr/bin/env bash
# The neural-lam environment of the interoperability tests (scripts/cached-env.sh makes it
# once and prints its python). neural-lam is pinned so the tier tests a known release. torch
# is pinned too and installed with it: the environment sees the system site-packages, which
# hold the CPU torch when the tests run in the base interpreter, but not when they run inside
# a virtual environment (a venv's own packages are not "system" ones), and a bare torch
# requirement would then pull a multi-GB CUDA build. WXSTATS_TORCH names the pin
# (scripts/test.sh sets it).
set -euo pipefail
NEURALLAM_VERSION="${NEURALLAM_VERSION:-0.7.0}"
exec bash "$(dirname "$0")/cached-env.sh" "neural-lam-${NEURALLAM_VERSION}" "import neural_lam" yes \
    "${WXSTATS_TORCH:-torch==2.13.0}" "neural-lam==${NEURALLAM_VERSION}"
