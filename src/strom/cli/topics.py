"""`strom topics list|create|describe|delete`: topic administration through confluent-kafka."""

from __future__ import annotations

import click
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from rich.console import Console
from rich.table import Table

from strom.cli.broker import parse_config
from strom.errors import BrokerUnavailableError, StromError, UnknownTopicError
from strom.kafka import clients

TIMEOUT = 15.0
bootstrap_option = click.option(
    "--bootstrap-servers", envvar="STROM_BOOTSTRAP_SERVERS", default="127.0.0.1:9092", show_default=True,
    help="Kafka bootstrap servers (env STROM_BOOTSTRAP_SERVERS).")


@click.group()
def topics() -> None:
    """List, create, describe and delete topics."""


def _admin(bootstrap_servers: str) -> AdminClient:
    return clients.admin(bootstrap_servers)


def _metadata(admin: AdminClient, bootstrap_servers: str):
    try:
        return admin.list_topics(timeout=TIMEOUT)
    except KafkaException as exc:
        raise BrokerUnavailableError(f"No broker answered at {bootstrap_servers} ({exc}). Start one with "
                                     "`strom broker` or pass --bootstrap-servers.") from exc


def _result(future, what: str) -> None:
    try:
        future.result(TIMEOUT)
    except KafkaException as exc:
        raise StromError(f"Could not {what}: {exc.args[0].str()}") from exc


@topics.command("list")
@bootstrap_option
@click.option("--internal", is_flag=True, help="Include internal topics such as __consumer_offsets.")
def list_command(bootstrap_servers: str, internal: bool) -> None:
    """Topic names and partition counts."""
    metadata = _metadata(_admin(bootstrap_servers), bootstrap_servers)
    for name in sorted(metadata.topics):
        if internal or not name.startswith("__"):
            click.echo(f"{name}\t{len(metadata.topics[name].partitions)}")


@topics.command("create")
@bootstrap_option
@click.argument("name")
@click.option("--partitions", type=int, default=1, show_default=True)
@click.option("--config", "config", multiple=True, callback=parse_config, metavar="KEY=VALUE",
              help="Topic config with Kafka's name, e.g. cleanup.policy=compact; repeatable.")
def create_command(bootstrap_servers: str, name: str, partitions: int, config: dict[str, str]) -> None:
    """Create a topic."""
    admin = _admin(bootstrap_servers)
    _metadata(admin, bootstrap_servers)
    new = NewTopic(name, partitions, 1, config=config)
    future = admin.create_topics([new], request_timeout=TIMEOUT)[name]
    _result(future, f"create topic {name!r}")
    click.echo(f"created {name} with {partitions} partition(s)")


@topics.command("describe")
@bootstrap_option
@click.argument("name")
def describe_command(bootstrap_servers: str, name: str) -> None:
    """Partitions with offsets, and the topic's configs."""
    admin = _admin(bootstrap_servers)
    metadata = _metadata(admin, bootstrap_servers)  # all topics: asking for one would auto-create it
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        raise UnknownTopicError(f"Topic {name!r} does not exist. See `strom topics list`.")
    consumer = clients.consumer(bootstrap_servers, None)
    table = Table("partition", "leader", "log start offset", "end offset")
    for index in sorted(topic.partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(name, index), timeout=TIMEOUT)
        table.add_row(str(index), str(topic.partitions[index].leader), str(low), str(high))
    consumer.close()
    resource = ConfigResource("topic", name)
    configs = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    console = Console()
    console.print(f"[bold]{name}[/bold]: {len(topic.partitions)} partition(s)")
    console.print(table)
    settings = Table("config", "value", "source")
    for key in sorted(configs):
        entry = configs[key]
        settings.add_row(key, entry.value, "default" if entry.is_default else "topic")
    console.print(settings)


@topics.command("delete")
@bootstrap_option
@click.argument("names", nargs=-1, required=True)
def delete_command(bootstrap_servers: str, names: tuple[str, ...]) -> None:
    """Delete topics and their data."""
    admin = _admin(bootstrap_servers)
    _metadata(admin, bootstrap_servers)
    for name, future in admin.delete_topics(list(names), request_timeout=TIMEOUT).items():
        _result(future, f"delete topic {name!r}")
        click.echo(f"deleted {name}")
