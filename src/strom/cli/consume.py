"""`strom consume TOPIC`: print records to stdout (value, optionally key and headers)."""

from __future__ import annotations

import time

import click
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

from strom.cli.topics import bootstrap_option
from strom.errors import StromError, UnknownTopicError
from strom.kafka import clients


@click.command()
@bootstrap_option
@click.argument("topic")
@click.option("--group", default=None,
              help="Consume as this group (offsets committed); default: every partition, no group.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the earliest offset when nothing is committed.")
@click.option("--max-messages", type=int, default=None, help="Stop after this many records.")
@click.option("--idle-timeout", type=float, default=None,
              help="Stop when no record arrived for this many seconds (default: run until Ctrl-C).")
@click.option("--print-key", is_flag=True, help="Print key<separator>value.")
@click.option("--print-headers", is_flag=True, help="Print name=value,... headers before the record.")
@click.option("--separator", default="\t", show_default=True, help="Between headers, key and value.")
def consume(bootstrap_servers: str, topic: str, group: str | None, from_beginning: bool,
            max_messages: int | None, idle_timeout: float | None, print_key: bool, print_headers: bool,
            separator: str) -> None:
    """Print the records of TOPIC, one per line."""
    offset_reset = "earliest" if from_beginning else "latest"
    consumer = clients.consumer(bootstrap_servers, group, **{
        "auto.offset.reset": offset_reset, "enable.auto.commit": group is not None,
        "isolation.level": "read_committed"})
    if group is None:  # no group: read every partition directly, no rebalance to wait for
        metadata = consumer.list_topics(timeout=15)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise UnknownTopicError(f"Topic {topic!r} does not exist. See `strom topics list`.")
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in metadata.topics[topic].partitions])
    else:
        consumer.subscribe([topic])
    count = 0
    last = time.monotonic()
    try:
        while max_messages is None or count < max_messages:
            message = consumer.poll(0.5)
            if message is None:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    break
                continue
            if message.error():
                raise StromError(f"Could not consume {topic!r}: {message.error().str()}")
            last = time.monotonic()
            count += 1
            click.echo(_format(message, print_key, print_headers, separator))
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()


def _format(message, print_key: bool, print_headers: bool, separator: str) -> str:
    parts = []
    if print_headers:
        headers = message.headers() or []
        parts.append(",".join(f"{k}={(v or b'').decode(errors='replace')}" for k, v in headers))
    if print_key:
        parts.append((message.key() or b"").decode(errors="replace"))
    parts.append((message.value() or b"").decode(errors="replace"))
    return separator.join(parts)
