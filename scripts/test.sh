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
# the three environments are built at the same time (downloads and unpacking overlap;
# about half the time of one after another on two cores); each prints its python
for tier in neural-lam anemoi fme; do
    bash "scripts/$tier-env.sh" >"$RUN_TMP/$tier.python" &
    eval "pid_${tier//-/_}=$!"
done
for tier in neural-lam anemoi fme; do
    pid_var="pid_${tier//-/_}"
    wait "${!pid_var}" || { echo "scripts/test.sh: the $tier environment failed" >&2; exit 1; }
done
WXSTATS_NEURALLAM_PYTHON="$(cat "$RUN_TMP/neural-lam.python")"
WXSTATS_ANEMOI_PYTHON="$(cat "$RUN_TMP/anemoi.python")"
WXSTATS_FME_PYTHON="$(cat "$RUN_TMP/fme.python")"
export WXSTATS_NEURALLAM_PYTHON WXSTATS_ANEMOI_PYTHON WXSTATS_FME_PYTHON
echo "scripts/test.sh: running the tests" >&2
# two workers (pytest-xdist; each module whole on one, tests/conftest.py): the suite
# waits on processes it starts about half the time, so two cores take it in ~60% of the time
python -m pytest -n "${WXSTATS_TEST_WORKERS:-2}" --dist loadgroup --basetemp="$RUN_TMP/pytest" "$@"
