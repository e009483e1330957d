"""`strom topics list|create|describe|delete|alter-config|add-partitions|delete-records`: topic
administration through confluent-kafka's AdminClient."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

import click
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from strom.cli.broker import parse_config
from strom.cli.connection import TIMEOUT, Connection, connection_options
from strom.cli.output import output_option, print_record, print_rows
from strom.errors import StromError
from strom.kafka.security import refusal

config_option = click.option("--config", "config", multiple=True, callback=parse_config, metavar="KEY=VALUE",
                             help="Topic config with Kafka's name, e.g. cleanup.policy=compact; repeatable.")


@click.group()
def topics() -> None:
    """List, create, describe, alter and delete topics (kafka-topics, kafka-configs, kafka-delete-records)."""


def result(future: Future, what: str,
           refused: Callable[[KafkaError], StromError | None] | None = None) -> Any:
    """The future's result; a refusal becomes one error naming what was attempted and the broker's reason
    (``refused``: the error of a missing ACL, naming the principal, resource and operation)."""
    try:
        return future.result(TIMEOUT)
    except KafkaException as exc:
        if refused is not None and (missing := refused(exc.args[0])) is not None:
            raise missing from None
        raise StromError(f"Could not {what}: {exc.args[0].str()}") from exc


def denied(connection: Connection, topic: str, operation: str) -> Callable[[KafkaError], StromError | None]:
    """``result``'s ``refused`` for a command that needs ``operation`` on ``topic``."""
    return partial(refusal, connection.properties, topic=topic, topic_operation=operation)


@topics.command("list")
@connection_options
@click.option("--internal", is_flag=True, help="Include internal topics such as __consumer_offsets.")
@output_option
def list_command(connection: Connection, internal: bool, output: str) -> None:
    """Topic names and partition counts."""
    metadata = connection.metadata()
    rows = [{"topic": name, "partitions": len(metadata.topics[name].partitions)}
            for name in sorted(metadata.topics) if internal or not name.startswith("__")]
    print_rows(rows, ["topic", "partitions"], output)


@topics.command("create")
@connection_options
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True,
              help="Partitions of the topic (records of one key go to one partition).")
@click.option("--replication-factor", type=click.IntRange(min=-1), default=-1, show_default=True,
              help="Copies of each partition; -1 takes the broker's default.replication.factor.")
@config_option
def create_command(connection: Connection, name: str, partitions: int, replication_factor: int,
                   config: dict[str, str]) -> None:
    """Create a topic."""
    if replication_factor == 0:
        raise click.BadParameter("must be -1 (the broker's default) or 1 or more",
                                 param_hint="--replication-factor")
    new = NewTopic(name, partitions, replication_factor, config=config)
    result(connection.admin().create_topics([new], request_timeout=TIMEOUT)[name], f"create topic {name!r}",
           denied(connection, name, "Create"))
    connection.wait_listed(name)  # so that the next command finds it
    click.echo(f"created {name} with {partitions} partition(s)")


def watermarks(connection: Connection, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """Log start and end offset of each partition."""
    consumer = connection.consumer()
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)
                for p in partitions}
    finally:
        consumer.close()


_SOURCES = {ConfigSource.DYNAMIC_TOPIC_CONFIG: "topic", ConfigSource.DYNAMIC_BROKER_CONFIG: "broker",
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "cluster default",
            ConfigSource.STATIC_BROKER_CONFIG: "broker static", ConfigSource.DEFAULT_CONFIG: "default"}
"""Where a topic's config comes from (Kafka's layers, as kafka-configs --describe names them, in words)."""


def _configs(connection: Connection, name: str) -> list[dict[str, Any]]:
    resource = ConfigResource("topic", name)
    configs = result(connection.admin().describe_configs([resource], request_timeout=TIMEOUT)[resource],
                     f"describe the configs of {name!r}", denied(connection, name, "DescribeConfigs"))
    return [{"config": key, "value": entry.value,
             "source": _SOURCES.get(ConfigSource(entry.source), "unknown")}
            for key, entry in sorted(configs.items())]



@topics.command("describe")
@connection_options
@click.argument("name")
@output_option
def describe_command(connection: Connection, name: str, output: str) -> None:
    """Partitions with offsets, and the topic's configs."""
    topic = connection.topic(name)
    offsets = watermarks(connection, name, sorted(topic.partitions))
    partitions = [{"partition": p, "leader": topic.partitions[p].leader,
                   "replicas": topic.partitions[p].replicas, "isr": topic.partitions[p].isrs,
                   "log start offset": low, "end offset": high} for p, (low, high) in offsets.items()]
    configs = _configs(connection, name)
    if output == "json":
        print_record({"topic": name, "partitions": partitions, "configs": configs}, output)
        return
    click.echo(f"{name}: {len(partitions)} partition(s)")
    print_rows(partitions, ["partition", "leader", "replicas", "isr", "log start offset", "end offset"],
               output)
    print_rows(configs, ["config", "value", "source"], output)


@topics.command("delete")
@connection_options
@click.argument("names", nargs=-1, required=True)
def delete_command(connection: Connection, names: tuple[str, ...]) -> None:
    """Delete topics and their data."""
    for name in names:
        connection.topic(name, needs="Delete")
    for name, future in connection.admin().delete_topics(list(names), request_timeout=TIMEOUT).items():
        result(future, f"delete topic {name!r}", denied(connection, name, "Delete"))
    connection.wait_unlisted(list(names))  # so that the next command does not find them
    for name in names:
        click.echo(f"deleted {name}")


@topics.command("alter-config")
@connection_options
@click.argument("name")
@click.option("--set", "settings", multiple=True, callback=parse_config, metavar="KEY=VALUE",
              help="Set a topic config, e.g. retention.ms=60000; repeatable.")
@click.option("--delete", "deletions", multiple=True, metavar="KEY",
              help="Remove a topic config (back to the broker's default); repeatable.")
def alter_config_command(connection: Connection, name: str, settings: dict[str, str],
                         deletions: tuple[str, ...]) -> None:
    """Set or remove topic configs (kafka-configs --alter --add-config / --delete-config)."""
    if not settings and not deletions:
        raise click.UsageError("Give at least one --set KEY=VALUE or --delete KEY.")
    connection.topic(name, needs="AlterConfigs")
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletions]
    resource = ConfigResource("topic", name, incremental_configs=entries)
    result(connection.admin().incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource],
           f"alter the configs of {name!r}", denied(connection, name, "AlterConfigs"))
    click.echo(f"altered {name}: " + ", ".join([*(f"{k}={v}" for k, v in settings.items()),
                                                 *(f"-{k}" for k in deletions)]))


@topics.command("add-partitions")
@connection_options
@click.argument("name")
@click.option("--partitions", "total", type=click.IntRange(min=1), required=True,
              help="The new total number of partitions (as kafka-topics --alter --partitions).")
def add_partitions_command(connection: Connection, name: str, total: int) -> None:
    """Grow a topic to --partitions partitions (keys move: records of a key may land elsewhere after)."""
    current = len(connection.topic(name, needs="Alter").partitions)
    if total <= current:
        raise StromError(f"Topic {name!r} has {current} partition(s); --partitions must be more than that "
                         "(partitions cannot be removed).")
    result(connection.admin().create_partitions([NewPartitions(name, total)], request_timeout=TIMEOUT)[name],
           f"add partitions to {name!r}", denied(connection, name, "Alter"))
    click.echo(f"{name}: {current} -> {total} partition(s)")


@topics.command("delete-records")
@connection_options
@click.argument("name")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Only this partition; repeatable (default: every partition).")
@click.option("--before", required=True, metavar="OFFSET|end",
              help="Delete the records before this offset; `end` deletes every record.")
@output_option
def delete_records_command(connection: Connection, name: str, partitions: tuple[int, ...], before: str,
                           output: str) -> None:
    """Delete the records before an offset (kafka-delete-records): the log start offset moves up."""
    if before != "end" and not before.isdigit():
        raise click.BadParameter(f"{before!r} is not an offset (0 or more) or `end`", param_hint="--before")
    existing = sorted(connection.topic(name, needs="Delete").partitions)
    missing = sorted(set(partitions) - set(existing))
    if missing:
        raise StromError(f"Topic {name!r} has partitions 0-{len(existing) - 1}, not {missing}.")
    chosen = list(partitions) or existing
    ends = watermarks(connection, name, chosen)
    requests = [TopicPartition(name, p, ends[p][1] if before == "end" else min(int(before), ends[p][1]))
                for p in chosen]
    futures = connection.admin().delete_records(requests, request_timeout=TIMEOUT)
    rows = [{"partition": tp.partition,
             "log start offset": result(future, f"delete records of {name}-{tp.partition}",
                                        denied(connection, name, "Delete")).low_watermark}
            for tp, future in sorted(futures.items(), key=lambda item: item[0].partition)]
    print_rows(rows, ["partition", "log start offset"], output)
