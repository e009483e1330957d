"""`strom preflight`: checks that this machine can run strom's Spark pipelines."""

from __future__ import annotations

import click

from strom.spark.preflight import check_java


@click.command()
def preflight() -> None:
    """Check that Java 17+ is available for Spark."""
    java = check_java()
    click.echo(f"java {java.version} at {java.executable}: ok")
