"""mkdocs hook: the command-line reference page is the parser's own help.

``docs/cli.md`` holds the marker ``<!-- wxstats-cli -->``; at build time it is
replaced by ``wxstats COMMAND --help`` for every command, so the page can never
disagree with the program (the pages' option tables are prose; this is the
contract).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

MARKER = "<!-- wxstats-cli -->"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def cli_markdown() -> str:
    """Every command's ``--help``, one section each (80 columns, as a terminal)."""
    from wxstats.cli.parser import build_parser

    os.environ["COLUMNS"] = "88"
    parser = build_parser()
    parts = ["```text", parser.format_help().rstrip(), "```"]
    for action in parser._actions:  # argparse keeps the subcommands here only
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += [f"\n## `wxstats {name}`\n", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(parts) + "\n"


def on_page_markdown(markdown: str, **_: object) -> str:
    return markdown.replace(MARKER, cli_markdown()) if MARKER in markdown else markdown
