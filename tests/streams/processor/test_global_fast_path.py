"""A plain global table applies each fetch in one pass: as the topic's bytes when its serdes give back the
bytes they read (``raw``), else deserialized and written with ``put_all_timestamped`` (``typed``). The
store's bytes, the offsets, the counts, the warnings and the errors must be exactly those of the
per-record path (``put`` per record), and a record that will not deserialize goes to the configured
deserialization exception handler on every path, leaving the store and the offsets consistent."""

import json
import logging
import struct

import pytest
from confluent_kafka import Message

from strom.errors import SerializationError
from strom.kafka.serdes import Serdes, StringSerde
from strom.streams import Consumed, Materialized, Stores, StreamsBuilder, StreamsConfig, TopologyTestDriver
from strom.streams.processor.api import Processor
from strom.streams.processor.internals.global_state import GlobalStateStores, _reproduces_bytes

TOPIC = "rates"


def _long(n):
    return struct.pack(">q", n)


def _text(n):
    return str(n).encode()


def _json(n):
    return json.dumps({"rate": n}).encode()


# value serde, how it writes a number, bytes it cannot read, whether its bytes are written as read
# (Long: fixed width; String: UTF-8 text; Json: deserialized and serialized again)
VALUES = {"Long": (Serdes.Long, _long, b"\x01\x02\x03", True),
          "String": (Serdes.String, _text, b"\xff\xfe", True),
          "Json": (Serdes.Json, _json, b"{nope", False)}
PATHS = ("raw", "typed", "per-record")

# (partition, offset, timestamp, key, value): values, a tombstone, a null key, a key written twice,
# an empty key, a non-ASCII key; the third batch has a bad value on partition 1 between good records
BAD_BATCH = 2


def _batches(value, bad):
    return [
        [(0, 0, 100, b"eur", value(1)), (1, 0, 101, b"usd", value(-2)), (0, 1, 102, None, value(3))],
        [(0, 2, 103, b"eur", value(4)), (1, 1, 104, b"usd", None), (1, 2, 105, b"", value(2**62)),
         (0, 3, 106, "zürich".encode(), value(0))],
        [(0, 4, 108, b"eur", value(7)), (1, 3, 107, b"gbp", value(8)), (1, 4, 107, b"chf", bad),
         (1, 5, 109, b"nok", value(9))],
        [(1, 6, 110, b"sek", value(5))],
    ]


def _state(tmp_path, handler, rocksdb, path, value_serde, raw):
    builder = StreamsBuilder()
    stores = Stores.persistent_key_value_store if rocksdb else Stores.in_memory_key_value_store
    builder.global_table(TOPIC, Consumed.with_(Serdes.String(), value_serde()),
                         Materialized.as_(stores("rates")))
    config = StreamsConfig({"application.id": "global-fast", "state.dir": str(tmp_path),
                            "default.deserialization.exception.handler": handler})
    state = GlobalStateStores(builder.build().internal.global_stores, config, tmp_path / path)
    assert state._plain == {"rates"} and set(state._raw) == ({"rates"} if raw else set())
    if path != "raw" and raw:
        state._raw = {}
    if path == "per-record":
        state._plain = set()
    return state


def _snapshot(state):
    """What apply left behind: offsets, committed and buffered bytes, record context, puts counted."""
    transaction = state.context.transactions["rates"]
    context = state.context.record_context
    return (dict(state.offsets), list(transaction.wrapped.all()), dict(transaction._buffer),
            (context.timestamp, context.topic, context.partition, context.offset),
            state.stores["rates"].metrics.put)


def _run(state, batches):
    """Counts or the error per batch, and a snapshot after each."""
    results = []
    for batch in batches:
        try:
            count = state.apply(TOPIC, iter(batch))
        except SerializationError as exc:
            count = f"{type(exc).__name__}: {exc}"
        results.append((count, _snapshot(state)))
    return results


def _outcomes(tmp_path, caplog, handler, rocksdb, values, paths=PATHS):
    value_serde, value, bad, raw = VALUES[values]
    outcomes = {}
    for path in paths if raw else PATHS[1:]:
        state = _state(tmp_path, handler, rocksdb, path, value_serde, raw)
        try:
            with caplog.at_level(logging.WARNING):
                caplog.clear()
                results = _run(state, _batches(value, bad))
            outcomes[path] = results, [r.getMessage() for r in caplog.records]
        finally:
            state.close()
    return outcomes


def _committed(outcome, batch):
    results, _ = outcome
    return dict(results[batch][1][1])


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("rocksdb", [False, True], ids=["in-memory", "rocksdb"])
@pytest.mark.parametrize("handler", ["LogAndContinueExceptionHandler", "LogAndFailExceptionHandler"])
def test_every_path_writes_what_put_per_record_writes(tmp_path, caplog, handler, rocksdb, values):
    outcomes = _outcomes(tmp_path, caplog, handler, rocksdb, values)
    per_record = outcomes.pop("per-record")
    for outcome in outcomes.values():
        assert outcome == per_record
    results, warnings = per_record
    assert [count for count, _ in results[:2]] == [2, 4]
    assert warnings[0] == f"Skipping a global table record with a null key ({TOPIC}-0@1)"
    value_serde, value, _, _ = VALUES[values]

    def stored(timestamp, n):
        serde = value_serde()
        return _long(timestamp) + serde.serialize(TOPIC, serde.deserialize(TOPIC, value(n)))

    assert _committed(per_record, 1) == {b"eur": stored(103, 4), b"": stored(105, 2**62),
                                         "zürich".encode(): stored(106, 0)}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rocksdb", [False, True], ids=["in-memory", "rocksdb"])
def test_log_and_continue_skips_a_record_that_will_not_deserialize(tmp_path, caplog, rocksdb, path):
    (results, warnings), = _outcomes(tmp_path, caplog, "LogAndContinueExceptionHandler", rocksdb, "Long",
                                     (path,)).values()
    count, (offsets, committed, buffered, _, puts) = results[BAD_BATCH]
    assert count == 3 and buffered == {} and puts == 2 + 4 + 3
    assert offsets == {(TOPIC, 0): 5, (TOPIC, 1): 6}  # past the skipped record
    assert {b"eur", b"gbp", b"nok"} <= dict(committed).keys() and b"chf" not in dict(committed)
    assert warnings[1].startswith(f"Skipping record {TOPIC}-1@4 that could not be deserialized: Long cannot")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rocksdb", [False, True], ids=["in-memory", "rocksdb"])
def test_log_and_fail_commits_up_to_the_bad_record_and_points_the_offset_at_it(tmp_path, caplog, rocksdb,
                                                                               path):
    (results, _), = _outcomes(tmp_path, caplog, "LogAndFailExceptionHandler", rocksdb, "Long",
                              (path,)).values()
    error, (offsets, committed, buffered, context, puts) = results[BAD_BATCH]
    assert error.startswith(f"SerializationError: Global store 'rates' could not deserialize record "
                            f"{TOPIC}-1@4: Long cannot deserialize 3 bytes")
    # the records before the bad one are committed, nothing after it is written
    assert offsets == {(TOPIC, 0): 5, (TOPIC, 1): 4} and buffered == {} and puts == 2 + 4 + 2
    assert dict(committed) == {b"eur": _long(108) + _long(7), b"gbp": _long(107) + _long(8),
                               b"": _long(105) + _long(2**62), "zürich".encode(): _long(106) + _long(0)}
    assert context == (107, TOPIC, 1, 4)


@pytest.mark.parametrize("path", PATHS)
def test_a_failed_fetch_read_again_fails_again_at_the_same_record(tmp_path, path):
    state = _state(tmp_path, "LogAndFailExceptionHandler", False, path, Serdes.Long, True)
    fetch = [Message(topic=TOPIC, partition=0, offset=offset, key=key, value=value, timestamp=(1, 7))
             for offset, key, value in [(10, b"a", _long(1)), (11, b"b", b"?"), (12, b"c", _long(3))]]
    try:
        for _ in range(2):
            with pytest.raises(SerializationError, match=f"{TOPIC}-0@11"):
                state.apply_fetch(TOPIC, 0, fetch[state.offsets.get((TOPIC, 0), 10) - 10:])
            assert state.offsets == {(TOPIC, 0): 11}
            assert [key for key, _ in state.stores["rates"].all()] == ["a"]
    finally:
        state.close()


def test_only_serdes_that_give_back_the_bytes_they_read_are_written_raw():
    class Shouting(StringSerde):
        def deserialize(self, topic, data, headers=None):
            return super().deserialize(topic, data, headers).upper()

    exact = [Serdes.String(), Serdes.ByteArray(), Serdes.Long(), Serdes.Integer(), Serdes.Short()]
    inexact = [Serdes.String("latin-1"), Shouting(), Serdes.Double(), Serdes.Float(), Serdes.Json(),
               Serdes.Boolean(), Serdes.UUID()]
    assert [_reproduces_bytes(serde, TOPIC) for serde in exact] == [True] * len(exact)
    assert [_reproduces_bytes(serde, TOPIC) for serde in inexact] == [False] * len(inexact)


class _Rates(Processor):
    def init(self, context):
        self.rates = context.get_state_store("rates")

    def process(self, record):
        self.rates.put(record.key, record.value)


@pytest.mark.parametrize("handler", ["LogAndContinueExceptionHandler", "LogAndFailExceptionHandler"])
def test_a_global_store_processor_sees_only_records_that_deserialize(handler):
    builder = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("rates"), Serdes.String(),
                                           Serdes.Long()).with_logging_disabled()
    builder.add_global_store(store, TOPIC, Consumed.with_(Serdes.String(), Serdes.Long()), _Rates)
    props = {"application.id": "global-handler", "default.deserialization.exception.handler": handler}
    with TopologyTestDriver(builder.build(), props) as driver:
        rates = driver.create_input_topic(TOPIC, Serdes.String(), Serdes.ByteArray())
        rates.pipe_input("eur", _long(1))
        if handler == "LogAndFailExceptionHandler":
            with pytest.raises(SerializationError, match=f"could not deserialize record {TOPIC}-0@1"):
                rates.pipe_input("usd", b"?")
        else:
            rates.pipe_input("usd", b"?")
        rates.pipe_input("gbp", _long(3))
        assert dict(driver.get_key_value_store("rates").all()) == {"eur": 1, "gbp": 3}
