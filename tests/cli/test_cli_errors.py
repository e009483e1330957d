"""Every user error of issue #16 ends in one `error: ...` line that says what to do, and status 2."""

from __future__ import annotations

import time

import pytest

from cli.strom_cli import arg, one_error_line, subprocess_strom, unique
from strom.broker import EmbeddedBroker
from strom.kafka import clients

pytestmark = pytest.mark.broker

UNREACHABLE = "127.0.0.1:1"


@pytest.mark.slow
@pytest.mark.parametrize("args", [["consume", "plain"],
                                  ["consume", "plain", "--group", "g", "--idle-timeout", "3"]])
def test_consume_from_an_unreachable_broker_fails_fast_in_one_line(args, tmp_path):
    """As its own process: stderr holds exactly one line (no librdkafka ERROR lines, no traceback)."""
    started = time.monotonic()
    result = subprocess_strom(*args, "-b", UNREACHABLE, "--command-config", str(_empty(tmp_path)))
    line = one_error_line(result)
    # librdkafka's own reason (from its error callback), not a timeout of ours
    assert "No broker reachable at 127.0.0.1:1" in line and "Connection refused" in line, line
    assert "strom broker" in line
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("args", [
    ["tasks", "run", "os:getcwd", "--topic", "jobs", "--subscription", "s"],
    ["topics", "list"], ["topics", "create", "t"], ["groups", "list"], ["groups", "describe", "g"],
    ["produce", "plain"], ["transactions", "list"],
])
def test_every_command_reports_an_unreachable_broker_in_one_line(strom, args):
    line = strom.fails(*args, "-b", UNREACHABLE)
    assert "127.0.0.1:1" in line and ("Connection refused" in line or "[Errno 111]" in line), line


def _empty(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# nothing but a comment\n")
    return path


def test_non_utf8_separator_and_header_bytes_round_trip(strom):
    topic = unique("bin")
    strom.ok("topics", "create", topic)
    strom.ok("produce", topic, "--key-separator", arg(b"\xff"), "--header", arg(b"h=\xfe"),
             stdin=b"k\xffv\n")
    shown = strom.ok("consume", topic, "-o", "beginning", "-e", "-f", r"%k|%s|%h\n").out
    assert shown == b"k|v|h=\\xfe\n"
    raw = strom.ok("consume", topic, "-o", "beginning", "-e", "-f", "%k", "--key-deserializer", "bytes").out
    assert raw == b"k"
    assert "not UTF-8" in strom.fails("produce", topic, "--header", arg(b"\xff=v"), stdin=b"x\n")
    line = strom.fails("produce", topic, "--key-separator", arg(b"\xff"), stdin=b"k:v\n")
    assert "Line 1 has no key separator \\xff" in line


def test_an_oversize_value_is_reported_and_the_lines_before_it_are_written(strom):
    topic = unique("big")
    strom.ok("topics", "create", topic)
    stdin = b"first\nsecond\n" + b"x" * 2_000_000 + b"\nafter\n"
    line = strom.fails("produce", topic, stdin=stdin)
    assert "line 3 (2000000 bytes) is larger than message.max.bytes" in line
    assert "-X message.max.bytes" in line and "2 record(s) before it were written" in line
    assert strom.ok("consume", topic, "-o", "beginning", "-e").lines == ["first", "second"]


def test_the_brokers_refusal_of_a_large_record_names_its_line(strom):
    """-X lifts the client's limit, so the broker's own message.max.bytes refuses the record."""
    topic = unique("big")
    strom.ok("topics", "create", topic)
    line = strom.fails("produce", topic, "-X", "message.max.bytes=3000000",
                       stdin=b"small\n" + b"y" * 2_000_000 + b"\n")
    assert "line 2" in line and "larger than message.max.bytes" in line
    assert strom.ok("consume", topic, "-o", "beginning", "-e").lines == ["small"]


@pytest.mark.slow
def test_consume_with_a_group_starts_the_idle_timer_after_the_join(tmp_path, monkeypatch, capsysbinary):
    """A broker that delays a new group's first rebalance (Kafka's default is 3 s): an idle timeout
    shorter than the delay must still see the records."""
    from cli.strom_cli import Strom

    with EmbeddedBroker(data_dir=tmp_path, config={"group.initial.rebalance.delay.ms": "5000"}) as slow:
        strom = Strom(slow.bootstrap_servers, monkeypatch, capsysbinary)
        topic = unique("idle")
        strom.ok("topics", "create", topic)
        strom.ok("produce", topic, stdin=b"a\nb\n")
        printed = strom.ok("consume", topic, "--group", unique("g"), "-o", "beginning",
                           "--idle-timeout", "2.5")
        assert printed.lines == ["a", "b"]


def test_a_missing_topic_is_an_error_with_a_suggestion_unless_asked_to_create(strom, broker):
    topic = unique("orders")
    strom.ok("topics", "create", topic)
    typo = topic[:-1]
    for args in (["produce", typo], ["tasks", "run", "os:getcwd", "--topic", typo, "--subscription", "s"],
                 ["consume", typo], ["topics", "describe", typo], ["topics", "delete", typo]):
        line = strom.fails(*args, stdin=b"x\n")
        assert f"Topic {typo!r} does not exist. Did you mean {topic!r}?" in line, args
        assert ("pass --create-topic" in line) == (args[0] in ("produce", "tasks")), line
    assert typo not in strom.ok("topics", "list").out.decode().split()
    strom.ok("produce", typo, "--create-topic", stdin=b"x\n")
    assert strom.ok("consume", typo, "-o", "beginning", "-e").lines == ["x"]


@pytest.mark.parametrize(("args", "expected"), [
    (["topics", "create", "t", "--partitions", "-1"], "'--partitions': -1 is not in the range x>=1"),
    (["consume", "t", "--max-messages", "-1"], "'--max-messages': -1 is not in the range x>=1"),
    (["consume", "t", "-o", "yesterday"], "'yesterday' is not beginning, end, N, -N or @timestamp-ms"),
    (["consume", "t", "--idle-timeout", "0"], "0.0 is not in the range x>0"),
    (["consume", "t", "-f", "%x"], "unknown token %x"),
    (["produce", "t", "-p", "-2"], "-2 is not in the range x>=0"),
    (["topics", "create", "t", "--config", "retention.ms"], "'retention.ms' is not key=value"),
    (["groups", "reset-offsets", "g", "--topic", "t"], "Give exactly one of --to-earliest"),
    (["consume", "t", "--nope"], "No such option '--nope'"),
    (["demo", "--records", "0"], "'--records': 0 is not in the range x>=1"),
])
def test_bad_arguments_are_one_line_usage_errors(strom, args, expected):
    line = strom.fails(*args)
    assert expected in line and "--help" in line, line


@pytest.mark.parametrize(("config", "wanted"), [
    ("retention.ms=abc", "expected an integer >= 0 (or -1)."),
    ("retention.ms=-3", "expected an integer >= 0 (or -1)."),
    ("min.cleanable.dirty.ratio=x", "expected a number in [0, 1]."),
])
def test_a_bad_topic_config_value_is_the_brokers_one_line_answer(strom, config, wanted):
    line = strom.fails("topics", "create", unique("cfg"), "--config", config)
    key, value = config.split("=")
    assert f"Invalid value '{value}' for topic config '{key}': {wanted}" in line, line
    assert "invalid literal" not in line and "expected expected" not in line, line


@pytest.mark.parametrize(("config", "wanted"), [
    ("num.partitions=abc", "expected an integer in [1, 100000]."),
    ("num.partitions=-3", "expected an integer in [1, 100000]."),
    ("log.retention.ms=1.5", "expected an integer >= 0 (or -1)."),
    ("auto.create.topics.enable=yes", "expected true or false."),
    ("log.cleanup.policy=keep", "expected delete, compact or compact,delete."),
    ("advertised.listeners=nohost", "expected PLAINTEXT://host:port"),
])
def test_a_bad_broker_config_value_says_what_is_wanted_in_one_line(strom, tmp_path, config, wanted):
    line = strom.fails("broker", "--data-dir", str(tmp_path), "--port", "0", "--config", config)
    key, value = config.split("=")
    assert f"error: Invalid value '{value}' for configuration '{key}': {wanted}" in line, line
    assert "invalid literal" not in line and "expected expected" not in line, line


def test_long_and_binary_values_are_readable_and_nothing_is_truncated_when_piped(strom, broker):
    topic = unique("word-counts")
    strom.ok("topics", "create", topic)
    strom.ok("produce", topic, "-K", ":", "--value-serializer", "long",
             stdin=b"kafka:3\n" + b"\xc3\x28:-2\n")
    default = strom.ok("consume", topic, "-o", "beginning", "-e", "--print-key").lines
    assert default == ["kafka\t\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x03",
                       "\\xc3(\t\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe"]
    assert strom.ok("consume", topic, "-o", "beginning", "-e", "--print-key", "--value-deserializer",
                    "long").lines == ["kafka\t3", "\\xc3(\t-2"]

    long_id = "a-transactional-id-long-enough-to-be-cut-in-an-eighty-column-table-" + unique("x")
    producer = clients.producer(broker.bootstrap_servers, **{"transactional.id": long_id})
    producer.init_transactions(30)
    listed = strom.ok("transactions", "list").lines
    assert any(line.split("\t")[0] == long_id for line in listed), listed
    described = strom.ok("transactions", "describe", long_id).out.decode()
    assert long_id in described


def test_consume_reports_an_unknown_partition(strom):
    topic = unique("parts")
    strom.ok("topics", "create", topic, "--partitions", "2")
    assert "not [5]" in strom.fails("consume", topic, "-p", "5")
    assert "no -p" in strom.fails("consume", topic, "-p", "0", "--group", "g")


def test_commands_leave_nothing_in_the_working_directory(broker, tmp_path):
    """hypothesis (installed with strom's dev extras) caches into `.hypothesis/` of the working directory
    when kio's protocol classes import it; a strom command must not leave it (nor anything) there."""
    for args in (["transactions", "list"], ["topics", "list"]):
        result = subprocess_strom(*args, "-b", broker.bootstrap_servers, cwd=tmp_path)
        assert result.code == 0, result.err
    assert list(tmp_path.iterdir()) == []


def test_only_the_commands_with_schema_registry_formats_mention_it_in_their_help():
    for command, mentions in ((["topics", "list"], False), (["produce", "t"], True)):
        result = subprocess_strom(*command, "--help")
        assert result.code == 0 and "-X KEY=VALUE" in result.out.decode(), result.err
        assert ("Schema Registry settings" in result.out.decode()) is mentions, command
