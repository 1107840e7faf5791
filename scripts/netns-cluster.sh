#!/usr/bin/env bash
# A cluster of test hosts on this machine: each host a network namespace with
# its own address, hostname and /etc/hosts, all on one private switch; the
# file system is shared, like a cluster's shared disk. Needs root, `ip`
# (iproute2), `nsenter`, `unshare` and `mount` (util-linux). Used by
# tests/cluster.py; scripts/slurm-cluster.sh runs Slurm on it.
#
#   scripts/netns-cluster.sh start DIR [N]         # N hosts (default 2, at most 9)
#   scripts/netns-cluster.sh exec DIR HOST CMD...  # run CMD on HOST (wxs1 or 1)
#   scripts/netns-cluster.sh hosts DIR             # "name address netns", one host a line
#   scripts/netns-cluster.sh pids DIR HOST         # every process on HOST
#   scripts/netns-cluster.sh link DIR HOST up|down # plug / pull HOST's cable (switch side)
#   scripts/netns-cluster.sh stop DIR              # kill what runs there, remove it all
#
# Host i (0 <= i < N) is named wxs<i>, with address 10.77.0.<10+i>/24 on a
# bridge inside a switch namespace; the network namespaces are wxs<ID>-h<i>
# and wxs<ID>-sw, ID a hash of DIR, so that clusters in different DIRs do
# not meet (each has its own 10.77.0.0/24, out of reach of this machine's
# own namespace, which gets no interface, route or address).
#
# By hand:
#   sudo scripts/netns-cluster.sh start /tmp/c 2
#   sudo scripts/netns-cluster.sh exec /tmp/c wxs1 python -m http.server 8000 &
#   sudo scripts/netns-cluster.sh exec /tmp/c wxs0 python3 -c \
#       'import urllib.request as u; print(u.urlopen("http://wxs1:8000/").status)'  # 200
#   sudo scripts/netns-cluster.sh stop /tmp/c
#
# `exec` enters the host's network namespace and gives the command a UTS
# namespace with the host's name (`hostname` prints wxs1) and a mount
# namespace in which DIR/hosts (every host's name and address) is bound over
# /etc/hosts, and DIR/resolv.conf (no name server) over /etc/resolv.conf:
# names resolve the same way on every host, and only to the cluster's hosts.
# Everything else (files, users, PATH, the environment) is the caller's.
# Processes started by a command (daemons too) stay on that host. Plain
# `ip netns exec NETNS CMD` enters the network only: same addresses, but this
# machine's hostname and /etc/hosts (and a /sys without /sys/fs/cgroup).
#
# Where HOST's name must be its own (Slurm's slurmctld checks SlurmctldHost,
# torchrun ranks nodes by name, gloo binds to the address its hostname
# resolves to), use exec, not plain `ip netns exec`.
set -euo pipefail
shopt -s inherit_errexit

die() { echo "netns-cluster: $*" >&2; exit 1; }

PREFIX=10.77.0
FIRST=10 # host i has address $PREFIX.$((FIRST + i))

setup() { # DIR: sets DIR (absolute), ID, SW
    [ -n "${1:-}" ] || die "no DIR given"
    [ "${2:-}" != create ] || mkdir -p "$1"
    DIR=$(cd "$1" 2>/dev/null && pwd) || DIR=$(realpath -m "$1")
    ID=$(printf %s "$DIR" | cksum | cut -d' ' -f1)
    ID=$(printf %06x "$((ID % 16777216))")
    SW="wxs$ID-sw"
}

netns_of() { echo "wxs$ID-h$1"; }

count() {
    [ -s "$DIR/cluster.env" ] || die "no cluster in $DIR (start it first)"
    # shellcheck disable=SC1091
    (. "$DIR/cluster.env" && echo "$WXS_HOSTS")
}

host_index() { # HOST (wxs1 or 1) -> 1
    local n i
    n=$(count)
    i=${1#wxs}
    [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt "$n" ] || die "no host $1 (hosts are wxs0..wxs$((n - 1)))"
    echo "$i"
}

start() {
    local n=${1:-2} i ns
    [[ "$n" =~ ^[1-9]$ ]] || die "N must be 1..9, not $n"
    [ "$(id -u)" = 0 ] || die "creating network namespaces needs root"
    command -v ip >/dev/null || die "no 'ip' command (install iproute2)"
    command -v unshare >/dev/null && command -v nsenter >/dev/null \
        || die "no 'unshare' or 'nsenter' command (install util-linux)"
    [ ! -e "$DIR/cluster.env" ] || die "a cluster is already running in $DIR (stop it first)"
    ip netns list | grep -q "^$SW\b" && die "namespace $SW exists: run stop $DIR first"
    trap 'stop >/dev/null 2>&1 || true' ERR
    ip netns add "$SW"
    ip -n "$SW" link set lo up
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    {
        echo "127.0.0.1 localhost"
        echo "::1 localhost ip6-localhost ip6-loopback"
    } >"$DIR/hosts.tmp"
    for ((i = 0; i < n; i++)); do
        ns=$(netns_of "$i")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip -n "$SW" link add "p$i" type veth peer name eth0 netns "$ns"
        ip -n "$SW" link set "p$i" master br0 up
        ip -n "$ns" addr add "$PREFIX.$((FIRST + i))/24" dev eth0
        ip -n "$ns" link set eth0 up
        echo "$PREFIX.$((FIRST + i)) wxs$i" >>"$DIR/hosts.tmp"
    done
    mv "$DIR/hosts.tmp" "$DIR/hosts"
    # no name server: a name that is not in hosts fails at once, and nothing
    # on a test host ever tries to reach beyond the cluster
    printf '# test hosts: names are in /etc/hosts only\nnameserver 127.0.0.1\noptions attempts:1 timeout:1\n' \
        >"$DIR/resolv.conf"
    printf 'WXS_HOSTS=%s\nWXS_ID=%s\n' "$n" "$ID" >"$DIR/cluster.env"
    trap - ERR
    # the bridge forwards once its ports are up: wait until every host answers host 0
    for ((i = 1; i < n; i++)); do
        local ok=0
        for _ in $(seq 1 50); do
            # a closed port answers with a reset: "refused" means the path works
            local said
            said=$(ip netns exec "$(netns_of "$i")" timeout 2 bash -c \
                "exec 3<>/dev/tcp/$PREFIX.$FIRST/9" 2>&1 || true)
            if [[ "$said" == *refused* ]]; then
                ok=1
                break
            fi
            sleep 0.1
        done
        [ $ok = 1 ] || { stop; die "host wxs$i cannot reach wxs0"; }
    done
    hosts
}

hosts() {
    local n i
    n=$(count)
    for ((i = 0; i < n; i++)); do
        echo "wxs$i $PREFIX.$((FIRST + i)) $(netns_of "$i")"
    done
}

run_on() { # HOST CMD...
    local i
    i=$(host_index "$1")
    shift
    [ $# -gt 0 ] || die "no command given"
    # nsenter rather than `ip netns exec`, which remounts /sys and so hides
    # /sys/fs/cgroup (slurmd refuses to start without it)
    exec nsenter --net="/run/netns/$(netns_of "$i")" unshare --uts --mount --propagation private -- \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts \
            && { mount --bind "$3" /etc/resolv.conf 2>/dev/null || true; } && shift 3 && exec "$@"' \
        sh "wxs$i" "$DIR/hosts" "$DIR/resolv.conf" "$@"
}

pids() {
    ip netns pids "$(netns_of "$(host_index "$1")")" 2>/dev/null || true
}

link() { # HOST up|down
    local i
    i=$(host_index "$1")
    case "${2:-}" in
        up | down) ip -n "$SW" link set "p$i" "$2" ;;
        *) die "usage: link DIR HOST up|down" ;;
    esac
}

stop() {
    # every namespace of this DIR, whether or not cluster.env survived
    local names ns pid left
    names=$(ip netns list 2>/dev/null | awk '{print $1}' | grep "^wxs$ID-" || true)
    for ns in $names; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -9 "$pid" 2>/dev/null || true
        done
    done
    for ns in $names; do
        for _ in $(seq 1 50); do
            left=$(ip netns pids "$ns" 2>/dev/null || true)
            [ -z "$left" ] && break
            sleep 0.1
        done
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -f "$DIR/cluster.env" "$DIR/hosts" "$DIR/hosts.tmp" "$DIR/resolv.conf"
}

cmd=${1:-}
shift || true
case "$cmd" in
    start) setup "${1:-}" create; start "${2:-2}" ;;
    stop) setup "${1:-}"; stop ;;
    hosts) setup "${1:-}"; hosts ;;
    exec) setup "${1:-}"; shift; [ -n "${1:-}" ] || die "usage: exec DIR HOST CMD..."; run_on "$@" ;;
    pids) setup "${1:-}"; pids "${2:-}" ;;
    link) setup "${1:-}"; link "${2:-}" "${3:-}" ;;
    *) die "usage: $0 start DIR [N] | exec DIR HOST CMD... | hosts DIR | pids DIR HOST | link DIR HOST up|down | stop DIR" ;;
esac
