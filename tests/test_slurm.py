"""wxstats under a real Slurm: a one-machine cluster (slurmctld + slurmd from
Debian's packages, started by scripts/slurm-local.sh for this session), ``srun``
with 1, 2 and 3 tasks, and the README's ``sbatch`` script.

The tier skips only where the Slurm packages cannot be installed (not root, no
apt-get, no network), and says so; a cluster that does not start is a failure.
Every ``srun``/``sbatch`` runs under ``timeout``: a job waiting for resources
must never hang the suite.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from distributed_helpers import (
    assert_identical_outputs,
    compute_args,
    env,
    odd_dataset_with_single_run,
    readme_sbatch_script,
    world_size_of,
)

from reference import assert_close, meps_reference

pytestmark = pytest.mark.slow  # processes started: the full tier, not the quick loop

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The environment of a running one-machine Slurm (SLURM_CONF set)."""
    install = subprocess.run(
        ["bash", str(SCRIPT), "install"], capture_output=True, text=True, timeout=600
    )
    if install.returncode != 0:
        pytest.skip(f"the Slurm packages cannot be installed here: {install.stderr.strip()}")
    state = tmp_path_factory.mktemp("slurm")
    start = subprocess.run(
        ["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True, timeout=120
    )
    assert start.returncode == 0, start.stderr + start.stdout
    environment = env()
    environment["SLURM_CONF"] = str(state / "slurm.conf")
    try:
        yield environment
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], timeout=60, check=False)


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    return odd_dataset_with_single_run(tmp_path_factory.mktemp("slurm_odd"))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_srun_is_byte_identical(slurm, odd, tmp_path, n):
    config, reference = odd
    out = tmp_path / "out"
    cmd = ["timeout", "180", "srun", "-n", str(n), "python", "-m", "wxstats"]
    result = subprocess.run(
        cmd + compute_args(config, out), env=slurm, capture_output=True, text=True, timeout=200
    )
    assert result.returncode == 0, result.stderr
    assert world_size_of(out) == n
    assert_identical_outputs(reference, out)


def _wait_for_job(job_id: str, environment: dict, deadline: float) -> str:
    """The job's final ``scontrol show job`` line (sbatch --wait polls slowly)."""
    while True:
        shown = subprocess.run(
            ["timeout", "30", "scontrol", "show", "job", "-o", job_id],
            env=environment,
            capture_output=True,
            text=True,
        ).stdout
        if re.search(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_ME)", shown):
            return shown
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], env=environment, timeout=30, check=False)
            pytest.fail(f"job {job_id} did not finish in time: {shown}")
        time.sleep(0.3)


def test_readme_sbatch_script(slurm, odd, tmp_path):
    """The README's multi-node script, as written, on the one node we have
    (sbatch options on the command line override its #SBATCH lines)."""
    config, reference = odd
    data = tmp_path / "data"
    shutil.copytree(config.parent, data, ignore=shutil.ignore_patterns("static"))
    script = tmp_path / "stats.sbatch"
    script.write_text(readme_sbatch_script())
    assert shutil.which("wxstats", path=slurm.get("PATH")), "the wxstats command is not installed"
    environment = dict(slurm, DATASTORE=str(data / config.name))
    submit = subprocess.run(
        ["timeout", "60", "sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2"]
        + ["--cpus-per-task=1", f"--chdir={tmp_path}", str(script)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.strip().split(";")[0]
    state = _wait_for_job(job_id, slurm, deadline=time.monotonic() + 240)
    log = tmp_path / f"wxstats-{job_id}.out"
    log_text = log.read_text() if log.exists() else ""
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, state + log_text
    summary = tmp_path / f"stats-{job_id}.json"
    run = json.loads(summary.read_text())["run"]
    assert run["world_size"] == 2 and run["threads_per_rank"] == 1
    assert "wrote 8 files" in log_text
    # the outputs landed in the datastore's static/ folder: same bytes as one process
    static = data / "static"
    (static / "summary.json").write_bytes(summary.read_bytes())
    assert_identical_outputs(reference, static, same_path=False)
    ref = meps_reference(data / config.name)
    assert_close(json.loads(summary.read_text())["state"]["std"], ref["std"], 1e-10, "std")
