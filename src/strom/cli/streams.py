"""`strom streams`: the application reset tool and the topology's description or picture.

`strom streams describe APP` prints the topology of a `strom run` APP: `describe()`'s text, or a Mermaid
or Graphviz graph (strom.streams.processor.topology_graph), or SVG drawn by Graphviz's `dot`.

`strom streams reset` is Kafka's application reset tool (kafka-streams-application-reset). Run it
while no instance of the application runs. It moves the committed offsets of group APP_ID on the
input topics (to the earliest offsets, or the first at a time), deletes the application's internal
topics (``<APP_ID>-...-changelog`` and ``-repartition``; the group's offsets on them go back to 0), and the
local state under ``<state.dir>/<APP_ID>``. The next start reprocesses the input from there. A running
application is refused, as Kafka's tool refuses a group with members: its drivers are members of
``<APP_ID>.instances`` (strom.kafka.instances), and its open tasks hold locks under the state directory.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, OffsetSpec

from strom.cli.broker import parse_config
from strom.cli.connection import Connection, connection_options
from strom.cli.groups import refuse_if_running, timestamp_ms
from strom.cli.query import query
from strom.errors import ConfigError, StromError
from strom.kafka import clients, offsets
from strom.kafka.security import refusal_behind
from strom.streams.config import DEFINITIONS, STATE_DIR, StreamsConfig

_TIMEOUT_S = 30.0


def internal_topics(topics: dict[str, int], app_id: str) -> list[str]:
    """Kafka Streams' rule: ``<application.id>-`` and a ``-changelog`` or ``-repartition`` suffix."""
    suffixes = ("-changelog", "-repartition")
    return sorted(t for t in topics if t.startswith(f"{app_id}-") and t.endswith(suffixes))


def _split(values: tuple[str, ...]) -> list[str]:
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


@click.group()
def streams() -> None:
    """Kafka Streams application tools."""


@streams.command()
@click.argument("app")
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid", "dot", "svg"]), default="text",
              show_default=True,
              help="describe()'s text, a Mermaid or Graphviz graph, or SVG (needs Graphviz).")
@click.option("--config", "configs", multiple=True, callback=parse_config, metavar="KEY=VALUE",
              help="A StreamsConfig key overriding APP's props (repeatable), checked as `strom run` does.")
def describe(app: str, fmt: str, configs: dict[str, str]) -> None:
    """Print the topology of APP (app.py with build(), or module:function), as `strom run` loads it."""
    from strom.cli.run import load_application

    topology, props = load_application(app)
    StreamsConfig({**props, **configs})  # a bad config fails here as it would in `strom run`
    description = topology.describe()
    if fmt == "text":
        click.echo(str(description), nl=False)
    elif fmt == "mermaid":
        click.echo(description.to_mermaid(), nl=False)
    elif fmt == "dot":
        click.echo(description.to_dot(), nl=False)
    else:
        click.echo(render_svg(description.to_dot()), nl=False)


def render_svg(dot: str) -> str:
    """SVG of a DOT graph by Graphviz's ``dot``."""
    executable = shutil.which("dot")
    if executable is None:
        raise click.ClickException(
            "--format svg needs Graphviz's `dot` on PATH: install Graphviz (apt-get install graphviz, brew "
            "install graphviz), or print --format dot and render it elsewhere.")
    result = subprocess.run([executable, "-Tsvg"], input=dot, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise click.ClickException(f"Graphviz's dot failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


@streams.command()
@click.argument("app_id")
@connection_options
@click.option("--input-topics", "inputs", multiple=True, metavar="TOPIC[,TOPIC]",
              help="Input topics whose committed offsets are reset (repeatable or comma-separated).")
@click.option("--to-earliest", is_flag=True, help="Reset input offsets to the earliest (the default).")
@click.option("--to-datetime", default=None, metavar="ISO-8601",
              help="Reset input offsets to the first record at or after this time (no zone: local time).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(DEFINITIONS[STATE_DIR][0]), show_default=True,
              help="The application's state.dir: <state-dir>/<APP_ID> is deleted.")
@click.option("--dry-run", is_flag=True, help="Print what would be reset and deleted; change nothing.")
def reset(app_id: str, connection: Connection, inputs: tuple[str, ...], to_earliest: bool,
          to_datetime: str | None, state_dir: Path, dry_run: bool) -> None:
    """Reset APP_ID to reprocess its input: input offsets, internal topics, local state."""
    if to_earliest and to_datetime:
        raise click.UsageError("Give --to-earliest or --to-datetime, not both.")
    spec = OffsetSpec.for_timestamp(timestamp_ms(to_datetime)) if to_datetime else OffsetSpec.earliest()
    admin = connection.admin()
    topics = {name: len(meta.partitions) for name, meta in connection.metadata().topics.items()
              if meta.error is None}
    input_topics = _split(inputs)
    missing = [t for t in input_topics if t not in topics]
    clients.check_described(admin, missing, connection.properties)  # hidden from this principal: said so
    if missing:
        raise ConfigError(f"Input topics {', '.join(missing)} do not exist; check --input-topics.")
    internal = internal_topics(topics, app_id)
    local = state_dir / app_id
    refuse_if_running(connection, app_id, "reset it")  # on any machine: its drivers' group
    _refuse_if_running(app_id, local)
    if not inputs:
        input_topics = _consumed_topics(admin, app_id, topics, internal)
        if not input_topics and not internal and not local.exists():
            raise ConfigError(f"No application {app_id!r} at {connection.bootstrap_servers}: its group has "
                              f"no committed offsets, there are no {app_id}-... internal topics and no local "
                              f"state in {state_dir}. Check APP_ID, --bootstrap-servers and --state-dir.")
        click.echo(f"input topics (the group's committed offsets): {', '.join(input_topics) or 'none'}")
    prefix = "(dry run) " if dry_run else ""
    partitions = [(t, p) for t in input_topics for p in range(topics[t])]
    targets = offsets.list_offsets(admin, partitions, spec)
    for (topic, partition), offset in sorted(targets.items()):
        click.echo(f"{prefix}input {topic}-{partition}: committed offset of group {app_id} -> {offset}")
    for topic in internal:
        click.echo(f"{prefix}delete internal topic {topic}")
    click.echo(f"{prefix}delete local state {local}" + ("" if local.exists() else " (not there)"))
    if dry_run:
        return
    try:
        offsets.reset(admin, app_id, targets)
        _delete_internal(admin, app_id, internal, topics)
    except (StromError, KafkaException) as exc:
        missing = refusal_behind(connection.properties, exc, group=app_id, topic=", ".join(internal),
                                 topic_operation="Delete")
        raise missing or exc from None
    connection.wait_unlisted(internal)  # the next start must create them anew, not find them
    shutil.rmtree(local, ignore_errors=True)
    click.echo(f"Application {app_id} reset: it reprocesses its input on the next start.")


def _consumed_topics(admin: AdminClient, app_id: str, topics: dict[str, int], internal: list[str]
                     ) -> list[str]:
    """The input topics of APP_ID when none are given: those its group committed offsets on (an
    application commits every input it reads), internal topics aside."""
    candidates = [(t, p) for t, n in topics.items() if t not in internal and not t.startswith("__")
                  for p in range(n)]
    return sorted({topic for topic, _ in offsets.committed(admin, app_id, candidates)})


def _refuse_if_running(app_id: str, local: Path) -> None:
    """A strom application holds each stream task's directory locked while it runs (a Spark runtime
    ``TaskLease``): one held on this machine means it runs (a Python worker may hold a task a while after
    its driver left the instances group), and a reset underneath would break it."""
    if not local.is_dir():
        return
    from strom.spark.runtime.lease import OWNER  # Spark's modules load only when there is state

    held = [owner.parent.name for owner in sorted(local.glob(f"*/{OWNER}")) if _locked(owner)]
    if held:
        raise ConfigError(f"Application {app_id} is running: its tasks {', '.join(held)} are open in "
                          f"{local}. Stop every instance (Ctrl-C or SIGTERM to `strom run`), then reset.")


def _locked(path: Path) -> bool:
    with path.open("rb") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(file, fcntl.LOCK_UN)
        return False


def _delete_internal(admin: AdminClient, app_id: str, internal: list[str], topics: dict[str, int]) -> None:
    """The group's offsets on the internal topics go back to 0 first: a recreated topic starts there."""
    committed = offsets.committed(admin, app_id, [(t, p) for t in internal for p in range(topics[t])])
    offsets.reset(admin, app_id, dict.fromkeys(committed, 0))
    if internal:
        for future in admin.delete_topics(internal, operation_timeout=_TIMEOUT_S).values():
            future.result(timeout=_TIMEOUT_S)


streams.add_command(query)  # strom.cli.query: a running application's store, over its HTTP face
