"""`strom produce TOPIC`: one record per stdin line (optionally key<sep>value), with headers."""

from __future__ import annotations

import sys

import click
from confluent_kafka import KafkaError, Message

from strom.cli.topics import bootstrap_option
from strom.errors import StromError
from strom.kafka import clients


def _header(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[tuple[str, bytes]]:
    headers = []
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not name=value")
        headers.append((name, value.encode()))
    return headers


@click.command()
@bootstrap_option
@click.argument("topic")
@click.option("--key-separator", default=None, help="Split each line at the first SEP into key and value.")
@click.option("--header", "headers", multiple=True, callback=_header, metavar="NAME=VALUE",
              help="Header added to every record; repeatable.")
@click.option("--partition", type=int, default=None, help="Write to this partition instead of by key.")
def produce(bootstrap_servers: str, topic: str, key_separator: str | None, headers: list[tuple[str, bytes]],
            partition: int | None) -> None:
    """Write stdin lines to TOPIC (idempotent, acks=all); prints how many were acknowledged."""
    producer = clients.producer(bootstrap_servers)
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(error)

    count = 0
    for line in sys.stdin.buffer:
        line = line.rstrip(b"\r\n")
        key = None
        if key_separator is not None:
            if key_separator.encode() not in line:
                raise StromError(f"Line {count + 1} has no key separator {key_separator!r}: {line[:80]!r}")
            key, line = line.split(key_separator.encode(), 1)
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=line, key=key, headers=headers, on_delivery=delivered, **extra)
        producer.poll(0)
        count += 1
    remaining = producer.flush(30)
    if failures or remaining:
        reason = failures[0].str() if failures else f"{remaining} record(s) not acknowledged in 30 s"
        raise StromError(f"{len(failures) + remaining} of {count} record(s) were not written to {topic!r}: "
                         f"{reason}. Check that the topic exists (`strom topics list`) and the broker runs.")
    click.echo(f"produced {count} record(s) to {topic}", err=True)
