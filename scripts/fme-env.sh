#!/usr/bin/env bash
# The fme (ai2cm's ACE) environment of the ACE interoperability test (scripts/cached-env.sh
# makes it once and prints its python). fme is pinned so the tier tests a known release; its
# torch is the shared one of neural-lam-env.sh (one torch for both tiers). torch-harmonics
# (an fme dependency) comes as a source package and builds without its optional C++/CUDA
# kernels here (its build environment has no torch), which the normalization code does not
# use; pip caches the wheel it builds.
set -euo pipefail
FME_VERSION="${FME_VERSION:-2026.10.0}"
exec bash "$(dirname "$0")/cached-env.sh" "fme-${FME_VERSION}" "import fme.core.normalizer" yes \
    "fme==${FME_VERSION}"
