"""`strom produce TOPIC`: one record per stdin line ([headers<TAB>][key<SEP>]value), idempotent, acks=all."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from strom.cli.connection import TIMEOUT, Connection, connection_options, create_topic_option, raw_argument
from strom.cli.formats import Format, convert, format_option
from strom.cli.output import escaped
from strom.errors import StromError
from strom.kafka import clients
from strom.kafka.security import authorization_error

Headers = list[tuple[str, bytes]]


def _header_name(name: bytes, where: str) -> str:
    try:
        return name.decode()
    except UnicodeDecodeError:
        raise StromError(f"Header name {escaped(name)} in {where} is not UTF-8; Kafka header names are "
                         "text (values may be any bytes).") from None


def parse_header(item: bytes, where: str) -> tuple[str, bytes]:
    name, sep, value = item.partition(b"=")
    if not sep or not name:
        raise StromError(f"Header {escaped(item)} in {where} is not name=value.")
    return _header_name(name, where), value


def _header_option(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> Headers:
    return [parse_header(raw_argument(item), "--header") for item in values]


def _separator(_ctx: click.Context, _param: click.Parameter, value: str | None) -> bytes | None:
    if value == "":
        raise click.BadParameter("must not be empty")
    return None if value is None else raw_argument(value)


@dataclass
class LineFormat:
    """How a line splits into headers, key and value, and how each becomes record bytes."""

    key_separator: bytes | None
    headers_delimiter: bytes | None
    null_marker: bytes | None
    key_format: Format
    value_format: Format
    fixed_headers: Headers = field(default_factory=list)

    def record(self, line: bytes, number: int) -> tuple[bytes | None, bytes | None, Headers]:
        where = f"line {number}"
        headers = list(self.fixed_headers)
        if self.headers_delimiter is not None:
            head, sep, line = line.partition(self.headers_delimiter)
            if not sep:
                raise StromError(f"Line {number} has no headers delimiter {escaped(self.headers_delimiter)}: "
                                 f"{escaped(head[:80])}. Start each line with name=value,...<delimiter>.")
            headers += [parse_header(item, where) for item in head.split(b",") if item]
        key = None
        if self.key_separator is not None:
            key, sep, line = line.partition(self.key_separator)
            if not sep:
                raise StromError(f"Line {number} has no key separator {escaped(self.key_separator)}: "
                                 f"{escaped(key[:80])}.")
            key = self._bytes(self.key_format, key, f"The key on {where}")
        return key, self._bytes(self.value_format, line, f"The value on {where}"), headers

    def _bytes(self, fmt: Format, text: bytes, what: str) -> bytes | None:
        if text == self.null_marker:
            return None
        return convert(fmt, fmt.parse, text, what)


@click.command()
@connection_options(schema_registry=True)
@click.argument("topic")
@click.option("-K", "--key-separator", default=None, callback=_separator,
              help="Split each line at the first SEP into key and value.")
@click.option("--header", "headers", multiple=True, callback=_header_option, metavar="NAME=VALUE",
              help="Header added to every record; repeatable.")
@click.option("--parse-headers", "headers_delimiter", default=None, callback=_separator, metavar="DELIM",
              help="Each line starts with its own headers, name=value,... then DELIM (e.g. a tab).")
@click.option("--null-marker", default=None, help="A key or value equal to this is produced as null "
              "(a tombstone for a value); '' makes empty values null, as kcat -Z.")
@click.option("-p", "--partition", type=click.IntRange(min=0), default=None,
              help="Write to this partition instead of by key.")
@create_topic_option
@format_option("--key-serializer", help="How key text becomes bytes (long: 8-byte big-endian, as Kafka's).")
@format_option("--value-serializer", help="How value text becomes bytes (avro, json_schema: a JSON document "
               "written in Confluent's wire format, with -X schema.registry.url=URL).")
@click.option("--key-schema", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The writer's schema of avro/json_schema keys (registered if new); without it, -X "
                   "use.latest.version=true writes with the subject's latest schema.")
@click.option("--value-schema", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The writer's schema of avro/json_schema values, as --key-schema.")
def produce(connection: Connection, topic: str, key_separator: bytes | None, headers: Headers,
            headers_delimiter: bytes | None, null_marker: str | None, partition: int | None,
            create_topic: bool, key_serializer: Format, value_serializer: Format, key_schema: Path | None,
            value_schema: Path | None) -> None:
    """Write stdin lines to TOPIC and print how many were acknowledged (kcat -P, kafka-console-producer)."""
    count = len(connection.topic(topic, create=create_topic, offers_create=True, needs="Write").partitions)
    if partition is not None and partition >= count:
        raise StromError(f"Topic {topic!r} has {count} partition(s) (0-{count - 1}), not {partition}.")
    key_serializer = _writer(key_serializer, key_schema, connection, topic, is_key=True)
    value_serializer = _writer(value_serializer, value_schema, connection, topic, is_key=False)
    null = None if null_marker is None else raw_argument(null_marker)
    lines = LineFormat(key_separator, headers_delimiter, null, key_serializer, value_serializer, headers)
    producer = connection.producer(**clients.JAVA_PARTITIONER)
    writer = _Writer(producer, topic, partition, connection.properties)
    try:
        for number, line in enumerate(sys.stdin.buffer, 1):
            writer.write(number, *lines.record(line.rstrip(b"\r\n"), number))
    except StromError as exc:
        written = writer.finish()
        raise StromError(f"{exc} The {written} record(s) before it were written to {topic!r}.") from exc
    click.echo(f"produced {writer.finish()} record(s) to {topic}", err=True)


def _writer(fmt: Format, schema: Path | None, connection: Connection, topic: str, is_key: bool) -> Format:
    """The format bound to its registry and writer's schema (a registry format needs one: the file, or the
    subject's latest with -X use.latest.version=true)."""
    which = "key" if is_key else "value"
    if fmt.name == "protobuf" and schema is not None:
        raise click.UsageError(f"--{which}-serializer protobuf writes with the subject's latest schema (-X "
                               "use.latest.version=true): register the .proto first; a schema file is for "
                               "avro and json_schema.")
    if fmt.bind is None:
        if schema is not None:
            raise click.UsageError(f"--{which}-schema is for --{which}-serializer avro or json_schema.")
        return fmt
    latest = connection.serde_properties.get("use.latest.version", "").strip().lower() == "true"
    if schema is None and not latest:
        file = "" if fmt.name == "protobuf" else f"--{which}-schema FILE, or "
        raise click.UsageError(f"--{which}-serializer {fmt.name} needs the writer's schema: {file}"
                               "-X use.latest.version=true for the subject's latest schema.")
    text = None if schema is None else schema.read_text()
    return fmt.bound(connection.serde_properties, topic, is_key, text)


class _Writer:
    """Produces records in order and tells which line a refused record came from."""

    def __init__(self, producer: Producer, topic: str, partition: int | None,
                 settings: dict[str, str]) -> None:
        self._producer, self._topic, self._settings = producer, topic, settings
        self._extra = {} if partition is None else {"partition": partition}
        self._failures: list[tuple[int, KafkaError]] = []
        self._sent = 0

    def write(self, number: int, key: bytes | None, value: bytes | None, headers: Headers) -> None:
        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                self._failures.append((number, error))

        try:
            clients.produce(self._producer, self._topic, value, key, headers=headers, on_delivery=delivered,
                            **self._extra)
        except KafkaException as exc:
            raise StromError(_refusal(number, exc.args[0], value)) from exc
        self._sent += 1
        self._producer.poll(0)

    def finish(self) -> int:
        """Waits for the records sent; returns how many were written, or raises for the first refused."""
        try:
            remaining = self._producer.flush(TIMEOUT)
        except (KafkaException, SystemError) as exc:  # a fatal error; confluent-kafka may wrap it
            error = (exc if isinstance(exc, KafkaException) else exc.__cause__ or exc).args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                # an idempotent producer needs WRITE on some topic (or IDEMPOTENT_WRITE on the cluster)
                raise authorization_error(self._settings, "Topic", self._topic, "Write",
                                          error.name()) from None
            raise
        if self._failures:
            number, error = min(self._failures, key=lambda f: f[0])
            written = self._sent - len(self._failures) - remaining
            raise StromError(f"{_refusal(number, error, None)} {written} of {self._sent} record(s) were "
                             f"written to {self._topic!r}.")
        if remaining:
            raise StromError(f"{remaining} of {self._sent} record(s) were not acknowledged in "
                             f"{TIMEOUT:.0f} s; check that the broker runs (`strom topics list`).")
        return self._sent


def _refusal(number: int, error: KafkaError, value: bytes | None) -> str:
    if error.code() in (KafkaError.MSG_SIZE_TOO_LARGE,):
        size = "" if value is None else f" ({len(value)} bytes)"
        return (f"The record of line {number}{size} is larger than message.max.bytes: raise the client's "
                "limit with -X message.max.bytes=N and the topic's max.message.bytes "
                "(`strom topics alter-config`), or send less.")
    return f"The record of line {number} was refused: {error.str()}."
