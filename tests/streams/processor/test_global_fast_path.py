"""A plain global table applies each batch in one pass (``put_all_timestamped``); the store's bytes, the
offsets, the count and the errors must be exactly those of the per-record path (``put`` per record)."""

import logging
import struct

import pytest

from strom.errors import SerializationError
from strom.kafka.serdes import Serdes
from strom.streams import Consumed, Materialized, StreamsBuilder, StreamsConfig
from strom.streams.processor.internals.global_state import GlobalStateStores
from strom.streams.state.stores import Stores

TOPIC = "rates"


def _long(n):
    return struct.pack(">q", n)


def _text(n):
    return str(n).encode()


# value serde, how it writes a number, bytes it cannot read (Long: a fixed-width value written with one
# struct call; String: through the ValueAndTimestamp encoder)
VALUES = {"Long": (Serdes.Long, _long, b"\x01\x02\x03"), "String": (Serdes.String, _text, b"\xff\xfe")}


def _state(tmp_path, handler, rocksdb, plain, value_serde):
    builder = StreamsBuilder()
    stores = Stores.persistent_key_value_store if rocksdb else Stores.in_memory_key_value_store
    supplier = stores("rates")
    builder.global_table(TOPIC, Consumed.with_(Serdes.String(), value_serde()), Materialized.as_(supplier))
    config = StreamsConfig({"application.id": "global-fast", "state.dir": str(tmp_path),
                            "default.deserialization.exception.handler": handler})
    state = GlobalStateStores(builder.build().internal.global_stores, config,
                              tmp_path / ("plain" if plain else "per-record"))
    assert state._plain == {"rates"}  # a plain global table takes the one-pass path
    if not plain:
        state._plain = set()  # the per-record path, as every global table took before
    return state


def _outcome(state, batches):
    """What apply leaves behind: counts or the error per batch, the committed and buffered bytes."""
    results = []
    for batch in batches:
        try:
            results.append(state.apply(TOPIC, iter(batch)))
        except SerializationError as exc:
            results.append(f"{type(exc).__name__}: {exc}")
    transaction = state.context.transactions["rates"]
    context = state.context.record_context
    return (results, dict(state.offsets), list(transaction.wrapped.all()), dict(transaction._buffer),
            (context.timestamp, context.topic, context.partition, context.offset),
            state.stores["rates"].metrics.put)


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("rocksdb", [False, True], ids=["in-memory", "rocksdb"])
@pytest.mark.parametrize("handler", ["LogAndContinueExceptionHandler", "LogAndFailExceptionHandler"])
def test_one_pass_writes_what_put_per_record_writes(tmp_path, caplog, handler, rocksdb, values):
    value_serde, value, bad = VALUES[values]
    # (partition, offset, timestamp, key, value): values, a tombstone, a null key, a key written twice,
    # a bad record in the third batch
    batches = [
        [(0, 0, 100, b"eur", value(1)), (1, 0, 101, b"usd", value(-2)), (0, 1, 102, None, value(3))],
        [(0, 2, 103, b"eur", value(4)), (1, 1, 104, b"usd", None), (1, 2, 105, b"", value(2**62)),
         (0, 3, 106, "zürich".encode(), value(0))],
        [(0, 4, 108, b"eur", value(7)), (1, 3, 107, b"gbp", bad), (0, 5, 109, b"nok", value(9))],
        [(1, 4, 110, b"sek", value(5))],
    ]
    outcomes = []
    for plain in (True, False):
        state = _state(tmp_path, handler, rocksdb, plain, value_serde)
        try:
            with caplog.at_level(logging.WARNING):
                caplog.clear()
                outcome = _outcome(state, batches)
            outcomes.append((outcome, [r.getMessage() for r in caplog.records]))
        finally:
            state.close()
    fast, per_record = outcomes
    assert fast == per_record
    (results, offsets, committed, buffered, _, _), warnings = fast
    assert results[:2] == [2, 4] and results[2].startswith("SerializationError") and results[3] == 1
    assert offsets == {(TOPIC, 0): 5, (TOPIC, 1): 5}  # past the bad record, as before
    # the failed batch's write before the bad record stays buffered and the next batch commits it
    assert dict(committed) == {b"": _long(105) + value(2**62), "zürich".encode(): _long(106) + value(0),
                               b"eur": _long(108) + value(7), b"sek": _long(110) + value(5)}
    assert buffered == {}
    assert warnings == [f"Skipping a global table record with a null key ({TOPIC}-0@1)"]
