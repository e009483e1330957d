"""`strom consume` and `strom produce` against the broker: kcat's -f tokens, -e, -o, -p, isolation level,
serializers and deserializers, null values, per-line headers."""

from __future__ import annotations

import base64
import json
import struct
import time

import pytest

from cli.strom_cli import unique
from strom.kafka import clients

pytestmark = pytest.mark.broker


def _topic(strom, partitions: int = 1) -> str:
    topic = unique("rec")
    strom.ok("topics", "create", topic, "--partitions", str(partitions))
    return topic


def test_format_tokens_and_escapes(strom):
    topic = _topic(strom)
    strom.ok("produce", topic, "-K", ":", "--header", "h1=a", "--header", "h2=b", stdin=b"key:value\n")
    line = strom.ok("consume", topic, "-o", "beginning", "-e",
                    "-f", r"%t|%p|%o|%k|%s|%h|%K|%S|%%\t%T\n").out.decode()
    fields, timestamp = line.rstrip("\n").split("\t")
    assert fields == f"{topic}|0|0|key|value|h1=a,h2=b|3|5|%"
    assert abs(int(timestamp) - time.time() * 1000) < 600_000


def test_null_values_and_keys_tombstones_and_lengths(strom):
    topic = _topic(strom)
    strom.ok("produce", topic, "-K", ":", "--null-marker", "NULL", stdin=b"a:1\na:NULL\nNULL:3\nb:\n")
    shown = strom.ok("consume", topic, "-o", "beginning", "-e", "-f", r"%k=%s %K %S\n").lines
    assert shown == ["a=1 1 1", "a= 1 -1", "=3 -1 1", "b= 1 0"]
    strom.ok("produce", topic, "-K", ":", "--null-marker", "", stdin=b"c:\n")  # kcat -Z
    assert strom.ok("consume", topic, "-o", "-1", "-e", "-f", r"%k %S\n").lines == ["c -1"]


def test_per_line_headers_and_a_chosen_partition(strom):
    topic = _topic(strom, partitions=3)
    strom.ok("produce", topic, "--parse-headers", "\t", "-K", ":", "-p", "2",
             stdin=b"trace=1,origin=x\tk:v\n\tk2:v2\n")
    shown = strom.ok("consume", topic, "-p", "2", "-o", "beginning", "-e", "-f", r"%p %h %k %s\n").lines
    assert shown == ["2 trace=1,origin=x k v", "2  k2 v2"]
    assert strom.ok("consume", topic, "-p", "0", "-p", "1", "-o", "beginning", "-e").lines == []
    assert "no headers delimiter" in strom.fails("produce", topic, "--parse-headers", "\t", stdin=b"x\n")


@pytest.mark.parametrize(("fmt", "text", "raw"), [
    ("long", b"-3", struct.pack(">q", -3)),
    ("int", b"70000", struct.pack(">i", 70000)),
    ("double", b"2.5", struct.pack(">d", 2.5)),
    ("json", b'{"a": [1, 2]}', b'{"a": [1, 2]}'),
    ("hex", b"00ff10", b"\x00\xff\x10"),
    ("base64", base64.b64encode(b"\x00\x01binary"), b"\x00\x01binary"),
    ("bytes", b"\xfe\xff raw", b"\xfe\xff raw"),
    ("string", "grüße".encode(), "grüße".encode()),
])
def test_serializers_write_what_the_deserializers_read(strom, broker, fmt, text, raw):
    topic = _topic(strom)
    strom.ok("produce", topic, "-K", "|", "--key-serializer", fmt, "--value-serializer", fmt,
             stdin=text + b"|" + text + b"\n")
    consumer = clients.consumer(broker.bootstrap_servers)
    consumer.subscribe([topic])
    message = None
    while message is None:
        message = consumer.poll(1)
    consumer.close()
    assert (message.key(), message.value()) == (raw, raw)
    shown = strom.ok("consume", topic, "-o", "beginning", "-e", "-f", r"%k|%s\n",
                     "--key-deserializer", fmt, "--value-deserializer", fmt).out
    expected = json.dumps(json.loads(text)).encode() if fmt == "json" else text
    assert shown == expected + b"|" + expected + b"\n"


def test_a_value_that_does_not_deserialize_names_the_record(strom):
    topic = _topic(strom)
    strom.ok("produce", topic, stdin=b"abc\n")
    line = strom.fails("consume", topic, "-o", "beginning", "-e", "--value-deserializer", "long")
    assert f"The value at {topic}-0@0 (3 bytes abc) is not long" in line
    assert "is not json" in strom.fails("produce", topic, "--value-serializer", "json", stdin=b"{nope\n")


@pytest.mark.slow
def test_offsets_beginning_end_absolute_relative_and_by_time(strom):
    topic = _topic(strom)
    strom.ok("produce", topic, stdin=b"".join(b"r%d\n" % i for i in range(5)))
    read = lambda *args: strom.ok("consume", topic, "-e", *args).lines  # noqa: E731
    assert read("-o", "beginning") == [f"r{i}" for i in range(5)]
    assert read("--from-beginning", "-c", "2") == ["r0", "r1"]
    assert read("-o", "3") == ["r3", "r4"]
    assert read("-o", "-2") == ["r3", "r4"]
    assert read("-o", "-99") == [f"r{i}" for i in range(5)]
    assert read("-o", "end") == []
    stamps = [int(t) for t in read("-o", "beginning", "-f", r"%T\n")]
    assert read("-o", f"@{stamps[0]}")[0] == "r0"
    assert read("-o", f"@{stamps[-1] + 1}") == []


def test_isolation_level_shows_or_hides_an_open_transaction(strom, broker):
    topic = _topic(strom)
    strom.ok("produce", topic, stdin=b"committed\n")
    producer = clients.producer(broker.bootstrap_servers, **{"transactional.id": unique("open")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"pending")
    producer.flush(30)
    try:
        assert strom.ok("consume", topic, "-o", "beginning", "-e").lines == ["committed"]
        assert strom.ok("consume", topic, "-o", "beginning", "-e", "--isolation-level",
                        "read_uncommitted").lines == ["committed", "pending"]
    finally:
        producer.abort_transaction(30)


def test_a_group_resumes_where_it_committed(strom):
    topic = _topic(strom, partitions=2)
    group = unique("g")
    strom.ok("produce", topic, "-K", ":", stdin=b"".join(b"k%d:v%d\n" % (i, i) for i in range(6)))
    first = strom.ok("consume", topic, "--group", group, "-o", "beginning", "-e").lines
    assert sorted(first) == [f"v{i}" for i in range(6)]
    strom.ok("produce", topic, "-K", ":", stdin=b"k9:later\n")
    assert strom.ok("consume", topic, "--group", group, "-e").lines == ["later"]
