"""The `strom` fixture: the command run in-process against the session's broker."""

from cli.strom_cli import strom  # noqa: F401
