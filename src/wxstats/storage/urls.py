"""Where stored data is: a local path, or an fsspec URL (``s3://``, ``gs://``, ``https://``...)."""

from __future__ import annotations


def is_url(text: str) -> bool:
    return "://" in text
