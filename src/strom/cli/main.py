"""Entry point of the `strom` command. Each subcommand lives in its own module of this package."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import tempfile
from pathlib import Path

import click
from confluent_kafka import KafkaError, KafkaException

from strom import __version__
from strom.cli.spark_session import launch_jvm_early
from strom.errors import StromError

COMMANDS = (
    "strom.cli.broker:broker",
    "strom.cli.consume:consume",
    "strom.cli.demo:demo",
    "strom.cli.groups:groups",
    "strom.cli.preflight:preflight",
    "strom.cli.produce:produce",
    "strom.cli.run:run",
    "strom.cli.streams:streams",
    "strom.cli.tasks:tasks",
    "strom.cli.topics:topics",
    "strom.cli.transactions:transactions",
)
"""``module:command`` of every subcommand, one per line in name order (add yours on its own line)."""


class _LazyGroup(click.Group):
    """Imports a subcommand's module when that command runs (or help lists it): ``strom run`` does not
    pay for the schema registry client, the transactions tools' protocol classes and the rest."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(entry.partition(":")[2] for entry in COMMANDS)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        for entry in COMMANDS:
            module, _, name = entry.partition(":")
            if name == cmd_name:
                command = getattr(importlib.import_module(module), name)
                self.add_command(command, name)
                return command
        return None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="strom")
@click.option("-v", "--verbose", count=True, help="More logging (-v info and librdkafka's log, -vv debug).")
def cli(verbose: int) -> None:
    """strom: Kafka Streams, Decaton and exactly-once Kafka in Python, run on Spark."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # librdkafka logs every failed connection attempt, and a fatal error (FATAL, at CRITICAL) before the
    # call that reports it raises it: commands report what failed in one error line
    logging.getLogger("strom.kafka.librdkafka").setLevel(level if verbose else logging.CRITICAL + 1)



def main() -> None:
    """Runs the command; every error a user can cause ends in one ``error: ...`` line and status 2."""
    # hypothesis, when installed, writes a cache into the working directory as kio's protocol classes
    # import it: strom's commands (and the brokers and workers they start) leave no `.hypothesis/` there
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                          str(Path(tempfile.gettempdir()) / f"strom-hypothesis-{os.getuid()}"))
    launch_jvm_early(sys.argv[1:])  # `strom run`'s and `strom demo`'s Spark JVM starts while they import
    try:
        cli(standalone_mode=False, prog_name="strom")
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        _fail(exc.format_message() + hint, exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except StromError as exc:
        _fail(str(exc), 2)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        reason = f"{error.str()} ({error.name()})" if isinstance(error, KafkaError) else str(error)
        _fail(f"{reason}. Check the broker log and the client settings "
              "(-X, --command-config).", 2)


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {' '.join(message.split())}", err=True)
    sys.exit(code)
