"""A cluster of test hosts on one machine, for the multi-node tests.

Each host is a network namespace with its own address, hostname and
``/etc/hosts`` on a private switch (``scripts/netns-cluster.sh``); the file
system is shared, like a cluster's shared disk. :func:`start_cluster` starts
one and returns a :class:`Cluster`; :func:`start_slurm_cluster` adds Slurm
(``scripts/slurm-cluster.sh``): slurmctld on ``wxs0``, slurmd on ``wxs1``...

Both skip the calling test (``pytest.skip``) with the reason where network
namespaces cannot be created here (not root, no ``ip``, no ``nsenter``, a
container without the capability) or Slurm cannot be installed; a cluster
that fails to start once namespaces work is an error.

:func:`fault_hooks` writes a ``sitecustomize`` that slows down or blocks the
opening of chosen files in the Python processes it reaches (through
``PYTHONPATH``), so that a test can act "mid-run" or make a read hang while
the process's other threads live on, and that logs the calls of a chosen
function (a collective) and blocks one rank at one of them. No test is defined here.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NETNS_SCRIPT = ROOT / "scripts" / "netns-cluster.sh"
SLURM_SCRIPT = ROOT / "scripts" / "slurm-cluster.sh"


# -- can this machine make hosts? ----------------------------------------------------


@functools.cache
def cannot_create_namespaces() -> str | None:
    """Why network namespaces cannot be made here, or ``None`` when they can
    (a namespace is created and removed to find out)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nsenter", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"no '{tool}' command (iproute2 / util-linux)"
    name = f"wxsprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        veth = subprocess.run(
            ["ip", "-n", name, "link", "add", "name", "wxsp0", "type", "veth"]
            + ["peer", "name", "wxsp1"],
            capture_output=True,
            text=True,
        )
        if veth.returncode != 0:
            return f"cannot create a veth pair: {veth.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _skip_unless_namespaces() -> None:
    reason = cannot_create_namespaces()
    if reason:
        pytest.skip(f"no test cluster: {reason}")


# -- the cluster ------------------------------------------------------------------


@dataclass
class Cluster:
    """Hosts ``wxs0``... started by ``scripts/netns-cluster.sh`` in ``directory``."""

    directory: Path
    hosts: list[str]
    addresses: dict[str, str]
    netns: dict[str, str]
    _popens: list[subprocess.Popen] = field(default_factory=list, repr=False)

    # -- running things on a host ---------------------------------------------------
    def command(self, host: str, cmd: Sequence[str], bare: bool = False) -> list[str]:
        """The argv that runs ``cmd`` on ``host`` (its network, hostname, /etc/hosts);
        ``bare``: its network only (``ip netns exec``), with this machine's hostname
        and /etc/hosts, as on a host whose own name resolves to loopback."""
        self._check(host)
        if bare:
            return ["ip", "netns", "exec", self.netns[host], *map(str, cmd)]
        return ["bash", str(NETNS_SCRIPT), "exec", str(self.directory), host, *map(str, cmd)]

    def exec(
        self,
        host: str,
        cmd: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        bare: bool = False,
        **kw,
    ) -> subprocess.CompletedProcess:
        """Run ``cmd`` on ``host`` to its end (text output captured)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(
            self.command(host, cmd, bare),
            env=dict(env if env is not None else os.environ),
            timeout=timeout,
            **kw,
        )

    def popen(
        self,
        host: str,
        cmd: Sequence[str],
        env: Mapping[str, str] | None = None,
        bare: bool = False,
        **kw,
    ) -> subprocess.Popen:
        """Start ``cmd`` on ``host``; the Popen's pid is the command's own (every
        step of the wrapper execs the next). Ended by :meth:`kill_all`/:meth:`stop`."""
        proc = subprocess.Popen(
            self.command(host, cmd, bare), env=dict(env if env is not None else os.environ), **kw
        )
        self._popens.append(proc)
        return proc

    def address(self, host: str) -> str:
        self._check(host)
        return self.addresses[host]

    # -- looking at and hurting hosts ----------------------------------------------
    def pids(self, host: str) -> list[int]:
        """Every process on ``host`` (in its network namespace)."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.netns[host]], capture_output=True, text=True
        ).stdout
        return [int(p) for p in out.split()]

    def kill_host(self, host: str, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process on ``host`` at once; the PIDs hit."""
        hit = []
        for pid in self.pids(host):
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except ProcessLookupError:
                pass
        return hit

    def link(self, host: str, up: bool) -> None:
        """Plug or pull ``host``'s cable (its port on the switch): when pulled,
        the host's packets vanish without an answer, as when a node dies."""
        subprocess.run(
            ["bash", str(NETNS_SCRIPT), "link", str(self.directory), host, "up" if up else "down"],
            check=True,
            capture_output=True,
        )

    def kill_all(self, hosts: Iterable[str] | None = None, keep: Iterable[int] = ()) -> None:
        """SIGKILL every process on ``hosts`` (default all) but ``keep``, wait until
        they are gone, reap what :meth:`popen` started there, and plug every cable."""
        keep = set(keep)
        hosts = list(self.hosts if hosts is None else hosts)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [p for h in hosts for p in self.pids(h) if p not in keep]
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGCONT)  # a stopped process dies only once resumed
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for proc in self._popens:
            if proc.poll() is None and proc.pid not in keep:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for host in self.hosts:
            self.link(host, True)

    def stop(self) -> None:
        """Kill everything on the hosts and remove them (idempotent)."""
        subprocess.run(
            ["bash", str(NETNS_SCRIPT), "stop", str(self.directory)],
            capture_output=True,
            timeout=60,
        )
        for proc in self._popens:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- processes of a job -----------------------------------------------------------
    def ranks(self, host: str, marker: str = "wxstats") -> dict[int, int]:
        """{rank: pid} of the job's ranks on ``host``: processes whose command line
        mentions ``marker`` and whose environment has ``RANK`` or ``SLURM_PROCID``
        (a torchrun agent has neither)."""
        found = {}
        for pid in self.pids(host):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() not in cmdline or b"python" not in cmdline:
                continue
            variables = dict(e.split(b"=", 1) for e in environ if b"=" in e)
            rank = variables.get(b"RANK")
            if rank is None and b"SLURM_STEP_ID" in variables:
                rank = variables.get(b"SLURM_PROCID")
            if rank is not None and rank.isdigit():
                found[int(rank)] = pid
        return found

    def _check(self, host: str) -> None:
        if host not in self.addresses:
            raise ValueError(f"no host {host!r} in this cluster ({', '.join(self.hosts)})")


def _read_hosts(directory: Path) -> Cluster:
    listed = subprocess.run(
        ["bash", str(NETNS_SCRIPT), "hosts", str(directory)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    hosts, addresses, netns = [], {}, {}
    for line in filter(None, listed):
        name, address, ns = line.split()
        hosts.append(name)
        addresses[name] = address
        netns[name] = ns
    return Cluster(directory=directory, hosts=hosts, addresses=addresses, netns=netns)


def start_cluster(directory: Path, n: int = 2) -> Cluster:
    """``n`` hosts (``wxs0``... at 10.77.0.10...) whose state lives in
    ``directory``; skips the test where namespaces cannot be made."""
    _skip_unless_namespaces()
    directory = Path(directory).resolve()
    started = subprocess.run(
        ["bash", str(NETNS_SCRIPT), "start", str(directory), str(n)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if started.returncode != 0:
        subprocess.run(["bash", str(NETNS_SCRIPT), "stop", str(directory)], capture_output=True)
        raise RuntimeError(f"the test cluster did not start: {started.stderr.strip()}")
    return _read_hosts(directory)


# -- Slurm on the cluster ------------------------------------------------------------


@dataclass
class SlurmCluster(Cluster):
    """A :class:`Cluster` running Slurm: slurmctld on ``wxs0``, slurmd on the others
    (the compute nodes, :attr:`nodes`). Client commands run on ``wxs0``."""

    conf: Path = Path()

    @property
    def nodes(self) -> list[str]:
        return self.hosts[1:]

    def client_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        out = dict(env if env is not None else os.environ)
        out["SLURM_CONF"] = str(self.conf)
        return out

    def client(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        **kw,
    ) -> subprocess.CompletedProcess:
        """A Slurm client command (srun, sbatch, scontrol...) on the login node
        ``wxs0``, under ``timeout`` (a job waiting for resources must not hang)."""
        wrapped = ["timeout", str(int(timeout)), *cmd]
        return self.exec("wxs0", wrapped, env=self.client_env(env), timeout=timeout + 30, **kw)

    def logs(self) -> str:
        """The daemons' logs, to show when something went wrong."""
        parts = []
        for log in sorted((self.directory / "slurm" / "log").glob("*.log")):
            parts.append(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]))
        return "\n".join(parts)

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(SLURM_SCRIPT), "stop", str(self.directory)],
            capture_output=True,
            timeout=60,
        )
        super().stop()


def start_slurm_cluster(directory: Path, nodes: int = 2) -> SlurmCluster:
    """slurmctld on ``wxs0`` and slurmd on ``wxs1``..``wxs<nodes>``, all idle;
    skips the test where namespaces cannot be made or the Slurm packages
    cannot be installed."""
    _skip_unless_namespaces()
    install = subprocess.run(
        ["bash", str(SLURM_SCRIPT), "install"], capture_output=True, text=True, timeout=600
    )
    if install.returncode != 0:
        pytest.skip(f"the Slurm packages cannot be installed here: {install.stderr.strip()}")
    directory = Path(directory).resolve()
    started = subprocess.run(
        ["bash", str(SLURM_SCRIPT), "start", str(directory), str(nodes)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if started.returncode != 0:
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop", str(directory)], capture_output=True)
        raise RuntimeError(f"the Slurm cluster did not start: {started.stderr.strip()}")
    plain = _read_hosts(directory)
    return SlurmCluster(
        directory=directory,
        hosts=plain.hosts,
        addresses=plain.addresses,
        netns=plain.netns,
        conf=directory / "slurm" / "slurm.conf",
    )


# -- who talks to whom ---------------------------------------------------------------


def established(cluster: Cluster, host: str) -> set[tuple[str, int, str, int]]:
    """(local address, port, peer address, peer port) of ``host``'s TCP connections."""
    out = subprocess.run(
        ["ss", "-N", cluster.netns[host], "-Htn", "state", "established"],
        capture_output=True,
        text=True,
    ).stdout
    found = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        local, peer = fields[-2], fields[-1]  # "state established" leaves out the state
        found.add((*_split_address(local), *_split_address(peer)))
    return found


def _split_address(text: str) -> tuple[str, int]:
    address, _, port = text.rpartition(":")
    address = address.strip("[]")
    address = re.sub(r"^::ffff:", "", address)
    return address, int(port)


class ConnectionWatch:
    """Polls ``host``'s TCP connections in a thread while a job runs."""

    def __init__(self, cluster: Cluster, host: str, interval: float = 0.2) -> None:
        import threading

        self.seen: set[tuple[str, int, str, int]] = set()
        self._stop = threading.Event()

        def poll() -> None:
            while not self._stop.is_set():
                self.seen |= established(cluster, host)
                self._stop.wait(interval)

        self._thread = threading.Thread(target=poll, daemon=True)

    def __enter__(self) -> ConnectionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# -- faults injected into Python processes ----------------------------------------------

_SITECUSTOMIZE = '''\
"""Test fault hooks (tests/cluster.py): act on builtins.open of chosen files.

WXS_FAULT_MATCH    glob of the paths acted on (fnmatch on the whole path)
WXS_FAULT_DELAY    seconds to sleep before each such open
WXS_FAULT_HANG     glob: an open of a matching path never returns (only this
                   thread blocks: the process's other threads go on)
WXS_FAULT_LOG      a file that gets a line "time rank host path" per matching open
WXS_FAULT_GATE     a path: opens matching WXS_FAULT_MATCH wait until it exists (the
                   test opens the gate when it has done what must come first)
WXS_FAULT_CALL     MODULE:FUNCTION (torch.distributed:all_reduce): each call is logged
                   to WXS_FAULT_LOG as "MODULE.FUNCTION#N" (the N-th call of the process)
WXS_FAULT_CALL_HANG  RANK:N: that rank's N-th call never returns (it blocks before
                   calling; the test kills it there, the other ranks inside the call)
"""
import builtins
import os
import sys

_match = os.environ.get("WXS_FAULT_MATCH", "")
_hang = os.environ.get("WXS_FAULT_HANG", "")
if _match or _hang:
    import fnmatch
    import socket
    import time

    _open = builtins.open
    _delay = float(os.environ.get("WXS_FAULT_DELAY", "0") or 0)
    _log = os.environ.get("WXS_FAULT_LOG", "")
    _gate = os.environ.get("WXS_FAULT_GATE", "")
    _rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "-"

    def _faulty_open(file, *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)):
            path = os.fsdecode(os.fspath(file))
            hang = bool(_hang) and fnmatch.fnmatch(path, _hang)
            if hang or (_match and fnmatch.fnmatch(path, _match)):
                if _log:
                    line = f"{time.time():.3f} {_rank} {socket.gethostname()} {path}\\n"
                    fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        os.write(fd, line.encode())
                    finally:
                        os.close(fd)
                while hang:
                    time.sleep(3600)
                if _delay:
                    time.sleep(_delay)
                while _gate and not os.path.exists(_gate):
                    time.sleep(0.05)
        return _open(file, *args, **kwargs)

    builtins.open = _faulty_open

_call = os.environ.get("WXS_FAULT_CALL", "")
if _call:
    import importlib.util
    import socket
    import threading
    import time

    _module, _function = _call.split(":")
    _hang_at = os.environ.get("WXS_FAULT_CALL_HANG", "")
    _who = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "-"
    _calls = [0]
    _count_lock = threading.Lock()

    def _log_call(what):
        log = os.environ.get("WXS_FAULT_LOG", "")
        if log:
            line = f"{time.time():.3f} {_who} {socket.gethostname()} {what}\\n"
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def _watched(real):
        def call(*args, **kwargs):
            with _count_lock:
                _calls[0] += 1
                n = _calls[0]
            _log_call(f"{_module}.{_function}#{n}")
            while _hang_at == f"{_who}:{n}":
                time.sleep(3600)
            return real(*args, **kwargs)

        return call

    class _WrapOnImport:
        """Wraps FUNCTION of MODULE once the module has run (a meta path finder)."""

        busy = False

        def find_spec(self, name, path=None, target=None):
            if name != _module or self.busy:
                return None
            self.busy = True
            try:
                spec = importlib.util.find_spec(name)
            finally:
                self.busy = False
            if spec is None or spec.loader is None:
                return None
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                setattr(module, _function, _watched(getattr(module, _function)))

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _WrapOnImport())
'''


def fault_hooks(directory: Path) -> Path:
    """A folder holding the fault ``sitecustomize``: put it first on ``PYTHONPATH``
    of the processes to affect, with the ``WXS_FAULT_*`` variables it reads."""
    folder = Path(directory) / "fault_hooks"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return folder


def with_fault_hooks(env: Mapping[str, str], hooks: Path, **variables: str) -> dict[str, str]:
    """``env`` with ``hooks`` first on ``PYTHONPATH`` and ``WXS_FAULT_<NAME>`` set
    from the keyword arguments (``delay=...``, ``match=...``, ``hang=...``, ``log=...``,
    ``gate=...``, ``call=...``, ``call_hang=...``)."""
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hooks), out.get("PYTHONPATH", "")]))
    for name, value in variables.items():
        out[f"WXS_FAULT_{name.upper()}"] = str(value)
    return out


def fault_log(path: Path) -> list[tuple[float, str, str, str]]:
    """(time, rank, host, path) of each open the hooks logged so far."""
    if not Path(path).exists():
        return []
    entries = []
    for line in Path(path).read_text().splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4:
            entries.append((float(parts[0]), parts[1], parts[2], parts[3]))
    return entries
