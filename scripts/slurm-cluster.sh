#!/usr/bin/env bash
# A multi-node Slurm on the test hosts of scripts/netns-cluster.sh, from
# Debian's packages: slurmctld on wxs0 (the controller and login node), slurmd
# on wxs1..wxsN, each with its own spool folder, pid file and log. Used by
# tests/test_multinode.py (through tests/cluster.py).
#
#   scripts/slurm-cluster.sh install            # apt-get the packages if missing (root)
#   scripts/slurm-cluster.sh start DIR [NODES]  # hosts + daemons (NODES compute nodes, default 2)
#   scripts/slurm-cluster.sh run DIR CMD...     # a client command (srun, sbatch, sinfo) on wxs0
#   scripts/slurm-cluster.sh stop DIR           # daemons, jobs and hosts gone
#
# For example:
#   sudo scripts/slurm-cluster.sh start /tmp/sc
#   sudo scripts/slurm-cluster.sh run /tmp/sc srun -N 2 --ntasks-per-node 2 hostname
#   sudo scripts/slurm-cluster.sh stop /tmp/sc
#
# `run` is `netns-cluster.sh exec DIR wxs0 env SLURM_CONF=DIR/slurm/slurm.conf CMD...`:
# the clients must run on a test host, since the daemons listen inside the
# hosts' namespaces, and srun's I/O ports must be reachable from the nodes.
# Node wxsN has NodeAddr 10.77.0.1N, CPUs=4 whatever this machine has (jobs that
# ask for more CPUs than a node has wait forever). Daemons and logs live in
# DIR/slurm. AuthType=auth/none: for tests only, never for a real cluster.
set -euo pipefail
shopt -s inherit_errexit

die() { echo "slurm-cluster: $*" >&2; exit 1; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETNS=$HERE/netns-cluster.sh

start() {
    local dir=$1 nodes=${2:-2} i names="" lines=""
    [[ "$nodes" =~ ^[1-8]$ ]] || die "NODES must be 1..8, not $nodes"
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null \
        || die "the Slurm packages are missing: run $0 install"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    bash "$NETNS" start "$dir" "$((nodes + 1))" >/dev/null
    local d=$dir/slurm
    rm -rf "$d"
    mkdir -p "$d/state" "$d/log"
    for ((i = 1; i <= nodes; i++)); do
        mkdir -p "$d/spool/wxs$i"
        lines+="NodeName=wxs$i NodeAddr=10.77.0.$((10 + i)) CPUs=4 RealMemory=1000 State=UNKNOWN"$'\n'
    done
    : >"$d/plugstack.conf"
    cat >"$d/slurm.conf" <<EOF
ClusterName=wxsmulti
SlurmctldHost=wxs0(10.77.0.10)
SlurmUser=root
AuthType=auth/none
CredType=cred/none
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
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
PlugStackConfig=$d/plugstack.conf
${lines}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    local conf=$d/slurm.conf
    bash "$NETNS" exec "$dir" wxs0 slurmctld -f "$conf" >"$d/log/slurmctld.out" 2>&1 \
        || { stop "$dir"; die "slurmctld did not start (see $d/log)"; }
    for ((i = 1; i <= nodes; i++)); do
        bash "$NETNS" exec "$dir" "wxs$i" slurmd -f "$conf" -N "wxs$i" \
            >"$d/log/slurmd-wxs$i.out" 2>&1 \
            || { stop "$dir"; die "slurmd did not start on wxs$i (see $d/log)"; }
    done
    local states=""
    for _ in $(seq 1 120); do
        states=$(run "$dir" sinfo -h -N -o "%N %T" 2>/dev/null || true)
        if [ "$(grep -c ' idle$' <<<"$states")" = "$nodes" ]; then
            echo "SLURM_CONF=$conf"
            return 0
        fi
        sleep 0.25
    done
    stop "$dir"
    die "the nodes did not become idle within 30 s (sinfo: ${states:-nothing}; see $d/log)"
}

run() {
    local dir=$1
    shift
    dir=$(cd "$dir" && pwd)
    exec_on=(bash "$NETNS" exec "$dir" wxs0 env "SLURM_CONF=$dir/slurm/slurm.conf")
    "${exec_on[@]}" "$@"
}

stop() {
    local dir=$1 pids=() f
    [ -d "$dir" ] || return 0
    dir=$(cd "$dir" && pwd)
    # the daemons first (by their pid files), so that they do not see their peers vanish
    for f in "$dir"/slurm/slurmd-*.pid "$dir/slurm/slurmctld.pid"; do
        [ -s "$f" ] && pids+=("$(cat "$f")")
    done
    if [ ${#pids[@]} -gt 0 ]; then
        kill "${pids[@]}" 2>/dev/null || true
        for _ in $(seq 1 30); do
            local alive=0 pid
            for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
            [ $alive = 0 ] && break
            sleep 0.1
        done
    fi
    # then whatever is left on the hosts (job steps, srun), and the hosts themselves
    bash "$NETNS" stop "$dir"
}

case "${1:-}" in
    install) bash "$HERE/slurm-local.sh" install ;;
    start) [ -n "${2:-}" ] || die "usage: $0 start DIR [NODES]"; start "$2" "${3:-2}" ;;
    run) [ -n "${2:-}" ] && [ -n "${3:-}" ] || die "usage: $0 run DIR CMD..."; shift; run "$@" ;;
    stop) [ -n "${2:-}" ] || die "usage: $0 stop DIR"; stop "$2" ;;
    *) die "usage: $0 install | start DIR [NODES] | run DIR CMD... | stop DIR" ;;
esac
