"""Reaching the job's store before torch does: a closed port or a silent host is
one line within ``--timeout``.

torch's TCPStore client, given a port nobody listens on, retries for the whole
timeout, logs each try in C++ (some twenty lines) and then tries once more,
taking twice the timeout for a message that states it once. A rank that
connects to the store (:func:`store_is_remote`) first waits for it to answer
with :func:`reach_master`, whose own loop is bounded by the timeout it states;
the store is created only once it answers. :func:`quiet_c10d` silences c10d's
C++ log, which repeats what the one line of a failure says (a user who sets
``TORCH_CPP_LOG_LEVEL`` keeps it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.parallel.launch import Launch


def quiet_c10d() -> None:
    """Before torch loads (it reads the level once): c10d's C++ log off, unless set."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")


def store_is_remote(launch: Launch, env: Mapping[str, str] | None = None) -> bool:
    """Whether this rank connects to the job's store rather than hosting it: every
    rank but 0, and every rank under torchrun's agent store (which torchrun runs)."""
    env = os.environ if env is None else env
    return launch.rank != 0 or env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"


RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
"""The pause between two refused connections to the job's store grows from the
first to the last (rank 0 may start later than this rank: a refusal is normal at first)."""


def reach_master(
    launch: Launch,
    timeout: float,
    *,
    connect: Any = socket.create_connection,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
) -> None:
    """Return once the job's store at ``MASTER_ADDR:MASTER_PORT`` accepts a TCP
    connection, trying again until ``timeout`` seconds have passed; then refuse in
    one line naming the address, what each try got and the seconds really waited.

    torch's own client, given a closed port, logs each failed try (some twenty
    lines of C++ logs) and tries twice, taking twice the timeout; this loop is
    bounded by ``timeout`` itself and the store is created only once it answers.
    ``connect``, ``clock`` and ``sleep`` are for tests."""
    where = f"{launch.master_addr}:{launch.master_port}"
    start = clock()
    deadline = start + timeout
    tries, pause = 0, RETRY_FIRST_S
    outcomes: dict[str, int] = {}
    while True:
        left = deadline - clock()
        if left <= 0:
            break
        tries += 1
        try:
            conn = connect((launch.master_addr, launch.master_port), timeout=left)
        except ConnectionRefusedError:
            outcome = "refused"
        except TimeoutError:
            outcome = "no answer"
        except OSError as exc:  # unreachable network, no route to the host...
            outcome = (exc.strerror or str(exc) or type(exc).__name__).lower()
        else:
            with contextlib.suppress(OSError):
                conn.close()
            return
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        sleep(max(0.0, min(pause, deadline - clock())))
        pause = min(2 * pause, RETRY_MAX_S)
    waited = clock() - start
    got = ", ".join(f"{what} {_times(n)}" for what, n in outcomes.items()) or "no try"
    hint = (
        "nothing listens there: is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?"
        if set(outcomes) == {"refused"}
        else "is the host up and reachable from this one?"
    )
    raise WxstatsError(
        f"rank {launch.rank}: could not join the job at {where} within {timeout:g} s: "
        f"{tries} connection {'try' if tries == 1 else 'tries'} in {waited:.1f} s, "
        f"{got} ({hint})"
    )


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"
