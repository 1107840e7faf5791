#!/usr/bin/env bash
# The neural-lam environment of the interoperability tests (scripts/cached-env.sh makes it
# once and prints its python). neural-lam is pinned so the tier tests a known release. Its
# torch is the one torch of the tiers (WXSTATS_TORCH, torch==2.13.0 unless set; the CPU
# build on machines whose pip has it, as scripts/test.sh says), installed once next to the
# environments and shared with the fme environment: a bare torch requirement resolved in a
# fresh environment would pull PyPI's multi-GB CUDA build, and a second copy 750 MB more.
set -euo pipefail
NEURALLAM_VERSION="${NEURALLAM_VERSION:-0.7.0}"
exec bash "$(dirname "$0")/cached-env.sh" "neural-lam-${NEURALLAM_VERSION}" \
    "import neural_lam.datastore.npyfilesmeps, neural_lam.datastore.mdp, mllam_data_prep" yes \
    "neural-lam==${NEURALLAM_VERSION}"
