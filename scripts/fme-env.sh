#!/usr/bin/env bash
# The fme (ai2cm's ACE) environment of the ACE interoperability test (scripts/cached-env.sh
# makes it once and prints its python). fme is pinned so the tier tests a known release;
# torch is pinned too and installed with it, as in neural-lam-env.sh: the environment sees
# the system site-packages (the CPU torch), but a bare "torch>=2.4" requirement resolved from
# inside a virtual environment would pull a multi-GB CUDA build. torch-harmonics (an fme
# dependency) comes as a source package and builds without its optional C++/CUDA kernels here
# (its build environment has no torch), which the normalization code does not use.
set -euo pipefail
FME_VERSION="${FME_VERSION:-2026.10.0}"
exec bash "$(dirname "$0")/cached-env.sh" "fme-${FME_VERSION}" "import fme.core.normalizer" yes \
    "${WXSTATS_TORCH:-torch==2.13.0}" "fme==${FME_VERSION}"
