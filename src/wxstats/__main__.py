"""``python -m wxstats`` (also what torchrun runs with ``-m wxstats``)."""

from wxstats.cli import console

raise SystemExit(console())
