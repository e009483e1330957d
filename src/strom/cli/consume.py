"""`strom consume TOPIC`: print records to stdout, one per line or as ``-f`` formats them (kcat's tokens)."""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import BinaryIO

import click
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from strom.cli.connection import TIMEOUT, Connection, connection_options
from strom.cli.formats import Format, convert, format_option
from strom.cli.output import escaped
from strom.errors import StromError
from strom.kafka import clients
from strom.kafka.reading import coordinator_moving
from strom.kafka.security import refusal

Field = Callable[[Message, Format, Format], bytes]


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _shown(fmt: Format, data: bytes | None, message: Message, what: str) -> bytes:
    if data is None:
        return b""
    return convert(fmt, fmt.show, data, f"The {what} at {message.topic()}-{message.partition()}"
                                        f"@{message.offset()}")


def _headers(message: Message) -> bytes:
    headers = message.headers() or []
    return ",".join(f"{k}={'' if v is None else escaped(v)}" for k, v in headers).encode()


FIELDS: dict[str, Field] = {
    "t": lambda m, _k, _v: m.topic().encode(),
    "p": lambda m, _k, _v: str(m.partition()).encode(),
    "o": lambda m, _k, _v: str(m.offset()).encode(),
    "k": lambda m, k, _v: _shown(k, m.key(), m, "key"),
    "s": lambda m, _k, v: _shown(v, m.value(), m, "value"),
    "T": lambda m, _k, _v: str(m.timestamp()[1]).encode(),
    "h": lambda m, _k, _v: _headers(m),
    "K": lambda m, _k, _v: _length(m.key()),
    "S": lambda m, _k, _v: _length(m.value()),
}
_TOKEN = re.compile(r"%(.)|\\(.)|([^%\\]+)|(.)", re.DOTALL)
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "0": b"\0"}


def parse_format(text: str) -> list[bytes | Field]:
    """kcat's ``-f``: %t %p %o %k %s %T %h %K %S, %% and the escapes \\n \\t \\r \\\\ \\0."""
    parts: list[bytes | Field] = []
    for field_name, escape, literal, stray in _TOKEN.findall(text):
        if field_name == "%":
            parts.append(b"%")
        elif field_name:
            if field_name not in FIELDS:
                raise click.BadParameter(f"unknown token %{field_name}; use %t %p %o %k %s %T %h %K %S",
                                         param_hint="-f/--format")
            parts.append(FIELDS[field_name])
        elif escape:
            parts.append(_ESCAPES.get(escape, b"\\" + escape.encode("utf-8", "surrogateescape")))
        else:
            parts.append((literal or stray).encode("utf-8", "surrogateescape"))
    return parts


def _default_format(print_key: bool, print_headers: bool, separator: str) -> str:
    tokens = [t for t, shown in (("%h", print_headers), ("%k", print_key), ("%s", True)) if shown]
    return separator.replace("%", "%%").replace("\\", "\\\\").join(tokens) + "\\n"


@dataclass
class StartAt:
    """Where reading starts (``-o``): beginning, end, an offset, N before the end, or a timestamp."""

    kind: str
    value: int = 0

    @classmethod
    def parse(cls, text: str) -> StartAt:
        if text in ("beginning", "end"):
            return cls(text)
        try:
            if text.startswith("@"):
                return cls("timestamp", int(text[1:]))
            number = int(text)
        except ValueError:
            raise click.BadParameter(f"{text!r} is not beginning, end, N, -N or @timestamp-ms",
                                     param_hint="-o/--offset") from None
        return cls("offset", number) if number >= 0 else cls("from-end", -number)


logger = logging.getLogger(__name__)

# Errors librdkafka recovers from by itself (a connection dropped, a leader moving, a topic created a
# moment ago and not yet known to every broker): the consumer goes on, as kcat and kafka-console-consumer do.
RECOVERING = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.UNKNOWN_TOPIC_OR_PART,
                        KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION})


def recovering(error: KafkaError) -> bool:
    return not error.fatal() and (error.code() in RECOVERING or coordinator_moving(error))


@dataclass
class Progress:
    """Partitions assigned, those read to their end (``-e``) and when the last record came."""

    assigned: set[tuple[str, int]] = field(default_factory=set)
    at_end: set[tuple[str, int]] = field(default_factory=set)
    last: float | None = None

    def on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned.update((p.topic, p.partition) for p in partitions)
        self.last = time.monotonic()  # the idle timer starts when there is something to read

    def on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            self.assigned.discard((p.topic, p.partition))
            self.at_end.discard((p.topic, p.partition))

    def idle_for(self) -> float:
        return 0.0 if self.last is None else time.monotonic() - self.last


@click.command()
@connection_options(schema_registry=True)
@click.argument("topic")
@click.option("-g", "--group", default=None,
              help="Consume as this group (offsets committed); default: the partitions directly, no group.")
@click.option("-o", "--offset", "start", default="end", show_default=True,
              callback=lambda _ctx, _param, value: StartAt.parse(value),
              help="Where to start: beginning, end, N (offset), -N (N before the end), @T (first record at "
                   "or after T ms since the epoch). With --group: beginning or end, if nothing is committed.")
@click.option("--from-beginning", is_flag=True, help="Same as -o beginning (kafka-console-consumer's flag).")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Read only this partition; repeatable.")
@click.option("-c", "--max-messages", type=click.IntRange(min=1), default=None,
              help="Stop after this many records.")
@click.option("-e", "--exit-at-end", is_flag=True, help="Stop when every partition is read to its end.")
@click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop when no record arrived for this many seconds after the partitions were assigned.")
@click.option("-f", "--format", "fmt", default=None,
              help=r"Output format with kcat's tokens: %t topic, %p partition, %o offset, %k key, %s value, "
                   r"%T timestamp, %h headers, %K/%S key/value length (-1 if null); \n \t escapes.")
@click.option("--print-key", is_flag=True, help="Print key<separator>value (without -f).")
@click.option("--print-headers", is_flag=True,
              help="Print name=value,... headers before the record (without -f).")
@click.option("--separator", default="\t", show_default="a tab",
              help="Between headers, key and value (without -f).")
@click.option("--isolation-level", type=click.Choice(["read_committed", "read_uncommitted"]),
              default="read_committed", show_default=True)
@format_option("--key-deserializer", help="How keys are shown.")
@format_option("--value-deserializer", help="How values are shown (bytes: written unchanged; avro, "
               "json_schema, protobuf: Confluent's wire format shown as JSON, with -X "
               "schema.registry.url=URL).")
def consume(connection: Connection, topic: str, group: str | None, start: StartAt, from_beginning: bool,
            partitions: tuple[int, ...], max_messages: int | None, exit_at_end: bool,
            idle_timeout: float | None, fmt: str | None, print_key: bool, print_headers: bool,
            separator: str, isolation_level: str, key_deserializer: Format,
            value_deserializer: Format) -> None:
    """Print the records of TOPIC, one per line (kcat -C, kafka-console-consumer)."""
    if from_beginning:
        start = StartAt("beginning")
    layout = parse_format(fmt if fmt is not None else _default_format(print_key, print_headers, separator))
    metadata = connection.topic(topic, needs="Read")
    key_deserializer = key_deserializer.bound(connection.serde_properties, topic, is_key=True)
    value_deserializer = value_deserializer.bound(connection.serde_properties, topic, is_key=False)
    if group is not None and (partitions or start.kind not in ("beginning", "end")):
        raise click.UsageError("With --group the group assigns partitions and keeps offsets: use -o "
                               "beginning or -o end, no -p (`strom groups reset-offsets` moves a group).")
    unknown = sorted(set(partitions) - set(metadata.partitions))
    if unknown:
        raise StromError(f"Topic {topic!r} has partitions 0-{len(metadata.partitions) - 1}, not {unknown}.")
    consumer = connection.consumer(group, **{
        "auto.offset.reset": "earliest" if start.kind == "beginning" else "latest",
        "enable.auto.commit": group is not None, "isolation.level": isolation_level,
        "enable.partition.eof": exit_at_end})
    progress = Progress()
    try:
        if group is None:
            chosen = [TopicPartition(topic, p) for p in (partitions or sorted(metadata.partitions))]
            assignment = _start_offsets(consumer, chosen, start)
            consumer.assign(assignment)
            progress.on_assign(consumer, assignment)
        else:
            consumer.subscribe([topic], on_assign=progress.on_assign, on_revoke=progress.on_revoke)
        _read(consumer, progress, layout, key_deserializer, value_deserializer, max_messages, exit_at_end,
              idle_timeout, partial(refusal, connection.properties, topic=topic,
                                    group=group or clients.UNUSED_GROUP,  # without -g: only looked up
                                    group_operation="Read" if group else "Describe"))
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()


def _start_offsets(consumer: Consumer, chosen: list[TopicPartition], start: StartAt) -> list[TopicPartition]:
    if start.kind in ("beginning", "end"):
        offset = OFFSET_BEGINNING if start.kind == "beginning" else OFFSET_END
        return [TopicPartition(tp.topic, tp.partition, offset) for tp in chosen]
    if start.kind == "timestamp":
        found = consumer.offsets_for_times(
            [TopicPartition(tp.topic, tp.partition, start.value) for tp in chosen], timeout=TIMEOUT)
        return [TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                for tp in found]
    offsets = []
    for tp in chosen:
        low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT)
        wanted = start.value if start.kind == "offset" else high - start.value
        offsets.append(TopicPartition(tp.topic, tp.partition, min(max(wanted, low), high)))
    return offsets


def _read(consumer: Consumer, progress: Progress, layout: list[bytes | Field], key_format: Format,
          value_format: Format, max_messages: int | None, exit_at_end: bool,
          idle_timeout: float | None, refused: Callable[[KafkaError], StromError | None]) -> None:
    out = sys.stdout.buffer
    try:
        _print(consumer, progress, out, layout, key_format, value_format, max_messages, exit_at_end,
               idle_timeout, refused)
    finally:
        out.flush()


def _print(consumer: Consumer, progress: Progress, out: BinaryIO, layout: list[bytes | Field],
           key_format: Format, value_format: Format, max_messages: int | None, exit_at_end: bool,
           idle_timeout: float | None, refused: Callable[[KafkaError], StromError | None] | None = None
           ) -> None:
    """``refused``: the error of a missing ACL (naming principal, resource and operation), if it is one."""
    interactive = out.isatty()
    count = 0
    while max_messages is None or count < max_messages:
        message = consumer.poll(0.5)
        if message is None:
            out.flush()
            if idle_timeout is not None and progress.idle_for() > idle_timeout:
                return
            continue
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                if refused is not None and (missing_acl := refused(error)) is not None:
                    raise missing_acl
                if not recovering(error):
                    raise StromError(f"Could not consume {message.topic()!r}: {error.str()}")
                logger.warning("consuming %r: %s (the consumer retries)", message.topic(), error.str())
                continue
            progress.at_end.add((message.topic(), message.partition()))
            if exit_at_end and progress.assigned and progress.at_end >= progress.assigned:
                return
            continue
        progress.last = time.monotonic()
        progress.at_end.discard((message.topic(), message.partition()))
        out.write(b"".join(p if isinstance(p, bytes) else p(message, key_format, value_format)
                           for p in layout))
        if interactive:
            out.flush()
        count += 1
