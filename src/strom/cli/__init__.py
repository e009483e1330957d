"""strom.cli: the `strom` command."""
