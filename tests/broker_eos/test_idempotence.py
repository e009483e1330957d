"""Idempotent produce against the real broker, with requests built by hand and resent on the wire."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from broker_eos.batches import data_batch
from broker_eos.wire import (
    READ_UNCOMMITTED,
    init_producer_id,
    latest_offset,
    produce_request,
    produce_result,
    send_batch,
)
from strom.broker import EmbeddedBroker
from strom.broker.transactions.markers import control_batch
from strom.kafka.clients import create_topics
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker
TOPIC = "idempotence"


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    """A broker of this module alone: the tests restart and crash it."""
    with EmbeddedBroker(tmp_path_factory.mktemp("idempotence-broker")) as running:
        create_topics(running.bootstrap_servers, {TOPIC: 1})
        yield running


def test_resent_request_is_written_once_and_a_gap_is_rejected(own_broker: EmbeddedBroker) -> None:
    with WireClient(own_broker.bootstrap_servers) as client:
        pid, epoch = init_producer_id(client)
        start = latest_offset(client, TOPIC, 0, READ_UNCOMMITTED)
        first = produce_request(TOPIC, 0, data_batch(pid, epoch, 0, [b"a", b"b"]))
        # The same request twice in flight, as a producer retrying after a lost response does.
        sent = [client.send_only(first), client.send_only(first)]
        results = [produce_result(client.receive(first, c)) for c in sent]
        assert results == [(ErrorCode.none, start), (ErrorCode.none, start)]
        assert send_batch(client, TOPIC, 0, data_batch(pid, epoch, 2, [b"c"])) == (ErrorCode.none, start + 2)
        resent = send_batch(client, TOPIC, 0, data_batch(pid, epoch, 0, [b"a", b"b"]))
        assert resent == (ErrorCode.none, start)
        error, _ = send_batch(client, TOPIC, 0, data_batch(pid, epoch, 7, [b"gap"]))
        assert error == ErrorCode.out_of_order_sequence_number
        assert latest_offset(client, TOPIC, 0, READ_UNCOMMITTED) == start + 3


def test_older_epoch_is_fenced_after_an_epoch_bump(own_broker: EmbeddedBroker) -> None:
    with WireClient(own_broker.bootstrap_servers) as client:
        pid, epoch = init_producer_id(client)
        assert send_batch(client, TOPIC, 0, data_batch(pid, epoch, 0, [b"old"]))[0] == ErrorCode.none
        same_pid, bumped = init_producer_id(client, pid, epoch)
        assert (same_pid, bumped) == (pid, epoch + 1)
        assert send_batch(client, TOPIC, 0, data_batch(pid, bumped, 0, [b"new"]))[0] == ErrorCode.none
        error, _ = send_batch(client, TOPIC, 0, data_batch(pid, epoch, 1, [b"zombie"]))
        assert error == ErrorCode.invalid_producer_epoch


def test_clients_cannot_write_transaction_markers(own_broker: EmbeddedBroker) -> None:
    with WireClient(own_broker.bootstrap_servers) as client:
        pid, epoch = init_producer_id(client)
        before = latest_offset(client, TOPIC, 0, READ_UNCOMMITTED)
        marker = control_batch(pid, epoch, True, 0, int(time.time() * 1000))
        assert send_batch(client, TOPIC, 0, marker)[0] == ErrorCode.invalid_record
        assert latest_offset(client, TOPIC, 0, READ_UNCOMMITTED) == before


@pytest.mark.parametrize("crash", [False, True], ids=["clean-restart", "kill-9"])
def test_duplicates_are_detected_after_a_broker_restart(own_broker: EmbeddedBroker, crash: bool) -> None:
    with WireClient(own_broker.bootstrap_servers) as client:
        pid, epoch = init_producer_id(client)
        _, base = send_batch(client, TOPIC, 0, data_batch(pid, epoch, 0, [b"x"]))
        send_batch(client, TOPIC, 0, data_batch(pid, epoch, 1, [b"y", b"z"]))
        end = latest_offset(client, TOPIC, 0, READ_UNCOMMITTED)
    if crash:
        own_broker.kill()
        own_broker.start()
    else:
        own_broker.restart()
    with WireClient(own_broker.bootstrap_servers) as client:
        resent = send_batch(client, TOPIC, 0, data_batch(pid, epoch, 1, [b"y", b"z"]))
        assert resent == (ErrorCode.none, base + 1)
        error, _ = send_batch(client, TOPIC, 0, data_batch(pid, epoch, 9, [b"gap"]))
        assert error == ErrorCode.out_of_order_sequence_number
        assert send_batch(client, TOPIC, 0, data_batch(pid, epoch, 3, [b"next"])) == (ErrorCode.none, end)
        assert init_producer_id(client)[0] > pid  # producer ids never repeat across restarts
