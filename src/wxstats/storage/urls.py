"""Where stored data is: a local path, or an fsspec URL (``s3://``, ``gs://``, ``https://``...)."""

from __future__ import annotations

from typing import Any


def is_url(text: str) -> bool:
    return "://" in text


REQUESTS_IN_FLIGHT = 64
"""Connections to an object store: a block's chunk objects are requested at once."""


def read_options(url: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    """fsspec options for reading ``url`` (the user's win): for S3, a connection
    pool as large as the requests in flight (botocore's 10 would queue them), and
    no HEAD before each GET (s3fs sends one to split objects over 50 MiB into
    ranges: twice the requests for chunk and metadata objects of a few MiB)."""
    options = dict(storage_options)
    if url.startswith(("s3://", "s3a://")):
        config = {"max_pool_connections": REQUESTS_IN_FLIGHT}
        options["config_kwargs"] = {**config, **options.get("config_kwargs", {})}
        options.setdefault("max_concurrency", 1)
    return options
