"""Where stored data is: a local path, or an fsspec URL (``s3://``, ``gs://``, ``https://``...)."""

from __future__ import annotations

import os
from typing import Any


def is_url(text: str) -> bool:
    return "://" in text


REQUESTS_IN_FLIGHT: int | None = None
"""Requests in flight to an object store, fixed (a benchmark's curve); ``None``:
chosen by what the store sustains (:class:`InFlight`)."""
FIRST_IN_FLIGHT = 64
"""Where the requests in flight start: a store takes that many at once (S3: thousands),
where fewer would be the first seconds of a 100 ms store's read spent below its rate
(32 in flight at 100 ms: at most ~290 objects a second, where the client here takes
~400 of 116 KB: 2.86 -> 2.76 s best of 6 at 64, ``benchmarks/bench_latency.py``'s store)."""
MOST_IN_FLIGHT = 256
"""The most requests in flight (and s3fs's connection pool): beyond, a store
throttles (S3: 503 SlowDown) before it is faster."""
GAIN = 1.15
"""The requests in flight double again when doubling them made them this much faster."""
KEEP = 1.05
"""The last doubling is undone unless it made them this much faster."""


class InFlight:
    """How many chunk requests an object store gets at once, chosen by what it
    sustains. With ``n`` requests in flight and ``latency`` to the first byte, a
    client gets ``n / latency`` objects a second until the store, the network or
    the client's own CPUs are the bound: the requests that fill the pipe are
    latency x bandwidth, which neither is known before the first requests (20 ms
    and 1 GB/s in a cloud region, 100 ms across an ocean, a few MB/s from a
    small server). So: start at ``FIRST_IN_FLIGHT``, measure the objects a
    second over ``2 n`` completed requests while requests wait for a slot (a
    window where the client asked for fewer says nothing of the store, and is
    started again), double while that grows by ``GAIN``, and once it does not,
    undo the last doubling unless it gained ``KEEP`` (at most ``MOST_IN_FLIGHT``). A fixed
    64 (per block fetched, two blocks at once) left a 100 ms store's pipe
    half empty for small chunks, and queued at a slow one while holding bytes
    in memory and inviting throttling."""

    def __init__(self, fixed: int | None = None) -> None:
        self.limit = max(1, fixed) if fixed else FIRST_IN_FLIGHT
        self.settled = fixed is not None
        self.rates: dict[int, float] = {}  # objects a second measured at each level
        self._start = 0.0
        self._count = -1  # -1: the window is not started
        self._skip = 0  # completions of requests sent before the last change

    def completed(self, saturated: bool, now: float) -> None:
        """One request completed at ``now``; ``saturated``: others waited for a slot."""
        if self.settled:
            return
        if not saturated:  # the client asked for fewer: not the store's rate
            self._count = -1
            return
        if self._skip > 0:
            self._skip -= 1
            return
        if self._count < 0:
            self._start, self._count = now, 0
            return
        self._count += 1
        if self._count < 2 * self.limit or now <= self._start:
            return
        rate = self._count / (now - self._start)
        self.rates[self.limit] = rate
        before = self.rates.get(self.limit // 2, 0.0)
        self._count = -1
        if rate >= GAIN * before and self.limit < MOST_IN_FLIGHT:
            self._skip = self.limit  # those sent at the level before
            self.limit = min(MOST_IN_FLIGHT, 2 * self.limit)
            return
        self.settled = True
        if rate < KEEP * before:  # no faster for twice the requests: the fewer
            self.limit //= 2


def read_options(url: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    """fsspec options for reading ``url`` (the user's win): for S3, a connection
    pool as large as the requests in flight (botocore's 10 would queue them), and
    no HEAD before each GET (s3fs sends one to split objects over 50 MiB into
    ranges: twice the requests for chunk and metadata objects of a few MiB)."""
    options = dict(storage_options)
    if url.startswith(("s3://", "s3a://")):
        config = {"max_pool_connections": REQUESTS_IN_FLIGHT or MOST_IN_FLIGHT}
        options["config_kwargs"] = {**config, **options.get("config_kwargs", {})}
        options.setdefault("max_concurrency", 1)
    return options


_S3_KEYS = {"key", "secret", "token", "anon", "endpoint_url", "requester_pays"}
"""s3fs options that obstore expresses (with ``client_kwargs``' region and endpoint and
``config_kwargs``' retries); with any other, chunk objects are read by fsspec."""


def object_store(url: str, storage_options: dict[str, Any]) -> tuple[Any, str] | None:
    """An obstore store and the key prefix of the objects under ``url``, for
    fetching chunk objects: its Rust client takes a block's hundreds of requests
    at ~1.7x the rate of s3fs's batched ``cat`` (docs/benchmarks.md, "Object
    stores"). ``None`` (fsspec reads them) unless obstore is installed, ``url`` is
    S3 and the credentials and region are known without botocore's own chain
    (profiles, config files, instance metadata): given in ``storage_options``
    (s3fs's names), ``anon``, or ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``,
    with a region or an endpoint."""
    if not url.startswith(("s3://", "s3a://")):
        return None
    try:
        from obstore.store import S3Store
    except ImportError:
        return None
    opts = dict(storage_options)
    client = dict(opts.pop("client_kwargs", {}) or {})
    retries = dict(opts.pop("config_kwargs", {}) or {})
    if set(opts) - _S3_KEYS or set(client) - {"region_name", "endpoint_url"}:
        return None
    if set(retries) - {"retries", "max_pool_connections"}:
        return None
    endpoint = opts.get("endpoint_url") or client.get("endpoint_url")
    anon = bool(opts.get("anon"))
    from_env = os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not anon and not opts.get("key") and not from_env:
        return None
    region = client.get("region_name") or os.environ.get(
        "AWS_REGION", os.environ.get("AWS_DEFAULT_REGION")
    )
    if region is None and not endpoint:
        return None  # s3fs finds a bucket's region; obstore would be redirected
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    config: dict[str, Any] = {"region": region or "us-east-1"}
    if anon:
        config["skip_signature"] = True
    elif opts.get("key"):
        config["access_key_id"] = opts["key"]
        config["secret_access_key"] = opts.get("secret")
        if opts.get("token"):
            config["token"] = opts["token"]
    if endpoint:
        config["endpoint"] = endpoint
    if opts.get("requester_pays"):
        config["request_payer"] = True
    retry: dict[str, Any] = {}
    attempts = (retries.get("retries") or {}).get("max_attempts")
    if attempts is not None:
        retry["max_retries"] = max(0, int(attempts) - 1)
    client_options = {"allow_http": True} if str(endpoint).startswith("http://") else {}
    try:
        store = S3Store(
            bucket, config=config, client_options=client_options, retry_config=retry or None
        )
    except Exception:  # a configuration obstore refuses: fsspec's reading, and its errors
        return None
    return store, prefix.strip("/")
