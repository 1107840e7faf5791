#!/usr/bin/env bash
# The project's test command (README "Quick start"; .ci/run calls it on a clean clone):
# install wxstats with its torch extra (the CPU build of torch: the ranks' tests need it)
# and the test tools, make (once, cached under
# ~/.cache/wxstats) the neural-lam, anemoi-datasets and fme (ACE) environments of the
# interoperability tier, run everything.
# The Slurm tier installs and starts a one-machine Slurm itself (tests/test_slurm.py).
#
# Everything the run writes to a temporary folder (pytest's folders, and what the
# processes it starts leave there: torchrun's logs, torch's compile caches...) goes into
# one folder of its own, removed when the command ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_TMP="$(mktemp -d "${TMPDIR:-/tmp}/wxstats-test.XXXXXX")"
trap 'rm -rf "$RUN_TMP"' EXIT
export TMPDIR="$RUN_TMP"
export WXSTATS_TORCH="torch==2.13.0"  # the CPU build on these machines; neural-lam-env.sh too
echo "scripts/test.sh: installing wxstats with torch and the test tools" >&2
python -m pip install -q "$WXSTATS_TORCH" -e ".[torch,test]" 2> >(grep -v "Running pip as the 'root'" >&2)
WXSTATS_NEURALLAM_PYTHON="$(bash scripts/neural-lam-env.sh)"
export WXSTATS_NEURALLAM_PYTHON
WXSTATS_ANEMOI_PYTHON="$(bash scripts/anemoi-env.sh)"
export WXSTATS_ANEMOI_PYTHON
WXSTATS_FME_PYTHON="$(bash scripts/fme-env.sh)"
export WXSTATS_FME_PYTHON
echo "scripts/test.sh: running the tests" >&2
python -m pytest --basetemp="$RUN_TMP/pytest" "$@"
