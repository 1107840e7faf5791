#!/usr/bin/env bash
# A real, one-machine Slurm for the tests (tests/test_slurm.py), from Debian's packages.
#
#   scripts/slurm-local.sh install        # apt-get the packages if missing (needs root)
#   scripts/slurm-local.sh start DIR      # daemons with their state, logs and slurm.conf in DIR
#   scripts/slurm-local.sh stop DIR       # stop them (by the PIDs in DIR) and wait until gone
#
# `start` prints SLURM_CONF=DIR/slurm.conf: every client needs it in its environment.
# AuthType=auth/none: for tests on one machine only, never for a real cluster.
set -euo pipefail

die() { echo "slurm-local: $*" >&2; exit 1; }

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null; then
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "the Slurm packages are missing and installing them needs root"
    command -v apt-get >/dev/null || die "the Slurm packages are missing and there is no apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client >/dev/null
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local dir=$1
    mkdir -p "$dir/state" "$dir/spool" "$dir/log"
    dir=$(cd "$dir" && pwd)
    local host cpus
    host=$(hostname -s)
    cpus=$(nproc)
    [ "$cpus" -ge 4 ] || cpus=4  # jobs asking for more CPUs than the node has wait forever
    : > "$dir/plugstack.conf"
    cat > "$dir/slurm.conf" <<EOF
ClusterName=wxstatstest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
PlugStackConfig=$dir/plugstack.conf
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 || die "slurmctld did not start (see $dir/log)"
    slurmd -f "$SLURM_CONF" -N "$host" >"$dir/log/slurmd.out" 2>&1 || die "slurmd did not start (see $dir/log)"
    for _ in $(seq 1 120); do
        if [ "$(sinfo -h -o %T 2>/dev/null | head -1)" = idle ]; then
            echo "SLURM_CONF=$SLURM_CONF"
            return 0
        fi
        sleep 0.25
    done
    stop "$dir"
    die "the node did not become idle within 30 s (see $dir/log)"
}

stop() {
    local dir=$1 pids=()
    for name in slurmd slurmctld; do
        if [ -s "$dir/$name.pid" ]; then
            pids+=("$(cat "$dir/$name.pid")")
        fi
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 50); do
        local alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && return 0
        sleep 0.1
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
}

case "${1:-}" in
    install) install ;;
    start) [ -n "${2:-}" ] || die "usage: $0 start DIR"; start "$2" ;;
    stop) [ -n "${2:-}" ] || die "usage: $0 stop DIR"; stop "$2" ;;
    *) die "usage: $0 install | start DIR | stop DIR" ;;
esac
