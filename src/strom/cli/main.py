"""Entry point of the `strom` command. Each subcommand lives in its own module of this package."""

from __future__ import annotations

import logging
import sys

import click

from strom import __version__
from strom.errors import StromError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="strom")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """strom: Kafka Streams, Decaton and exactly-once Kafka in Python, run on Spark."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _register_commands() -> None:
    """Subcommands are registered here so that `strom --help` lists only what exists."""
    from strom.cli import preflight

    cli.add_command(preflight.preflight)
    from strom.cli import tasks
    cli.add_command(tasks.tasks)
    from strom.cli import transactions
    cli.add_command(transactions.transactions)
    from strom.cli import broker, consume, produce, topics
    cli.add_command(broker.broker)
    cli.add_command(topics.topics)
    cli.add_command(produce.produce)
    cli.add_command(consume.consume)
    from strom.cli import demo
    cli.add_command(demo.demo)
    from strom.cli import run, streams
    cli.add_command(run.run)
    cli.add_command(streams.streams)


_register_commands()


def main() -> None:
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except StromError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
