"""How listings are printed: a table on a terminal, tab-separated lines when piped (never truncated),
or JSON with ``--output json``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

output_option = click.option("--output", type=click.Choice(["table", "json"]), default="table",
                             show_default=True, help="table (tab-separated when piped) or json.")


def console(stderr: bool = False) -> Console:
    """rich's console for a command's messages: a terminal's width on a terminal; otherwise no width at
    all, so a log collector gets every line whole (rich would hard-wrap it at 80 columns)."""
    terminal = Console(stderr=stderr)
    return terminal if terminal.is_terminal else Console(stderr=stderr, width=100_000, soft_wrap=True)


def print_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], output: str) -> None:
    """One row per dict; ``columns`` are the keys shown, in order (JSON shows every key, as a name
    ``jq`` takes: ``committed_offset`` for the column ``committed offset``)."""
    if output == "json":
        click.echo(json.dumps([_json_names(row) for row in rows], default=str))
        return
    if not sys.stdout.isatty():
        click.echo("\t".join(columns))
        for row in rows:
            click.echo("\t".join(_cell(row.get(c)) for c in columns))
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    Console().print(table)


def print_record(fields: dict[str, Any], output: str) -> None:
    """One object as name/value lines (or a JSON object)."""
    if output == "json":
        click.echo(json.dumps(_json_names(fields), default=str))
        return
    width = max(map(len, fields), default=0)
    for name, value in fields.items():
        click.echo(f"{name.ljust(width)}  {_cell(value)}")


def _json_names(fields: dict[str, Any]) -> dict[str, Any]:
    return {name.replace(" ", "_"): value for name, value in fields.items()}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def escaped(data: bytes) -> str:
    """Bytes as text: UTF-8 shown as it is, other bytes and control characters as \\xNN escapes."""
    text = data.decode("utf-8", errors="backslashreplace")
    return text if text.isprintable() else "".join(_ESCAPES.get(c, c) for c in text)


_ESCAPES = {chr(c): f"\\x{c:02x}" for c in (*range(32), 127)}
_ESCAPES.update({"\t": "\\t", "\n": "\\n", "\r": "\\r"})

