"""Reading partitions to their end: restoring a store from its changelog, filling a global table, a
test reading what a topology wrote. One loop, one stall rule and one error policy for all of them.

The consumer must have ``enable.partition.eof`` on (``end_consumer`` builds one): the end of a
partition is the EOF event librdkafka sends once it fetched everything up to the end, which under
``read_committed`` is the last stable offset. Offsets alone cannot tell the end: a transaction's
commit marker takes an offset no record has.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from strom.errors import BrokerUnavailableError, UnknownTopicError
from strom.kafka import clients
from strom.kafka.security import identity_of, refusal

__all__ = [
    "ASK_COMMITTED_S", "BATCH", "COORDINATOR_MOVING", "METADATA_TIMEOUT_S", "POLL_S", "STALL_TIMEOUT_S",
    "asked_again", "committed_offsets", "coordinator_moving", "end_consumer", "end_offset", "fetch_committed",
    "partitions_of", "read_batches", "read_to_end",
]

METADATA_TIMEOUT_S = 10.0
"""How long a metadata or watermark request may take before the broker counts as unreachable."""
ASK_COMMITTED_S = 5.0
"""One committed() call's wait: between calls a refused group is looked for (``fetch_committed``)."""
STALL_TIMEOUT_S = 120.0
"""How long a read may go without a record or an end-of-partition event before it fails."""
BATCH = 10_000
POLL_S = 1.0
YOUNG_COLLECTION_OBJECTS = 100_000
"""While a read runs, Python's youngest generation is collected every this many new objects (700 by
default): see ``_fewer_collections``."""

COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._WAIT_COORD})
COORDINATOR_BACKOFF_S = 0.2

_gc_lock = threading.Lock()
_gc_readers = 0
_gc_thresholds: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (before, while reading)


def coordinator_moving(error: KafkaError) -> bool:
    """An error that clears once a Kafka cluster has elected or loaded the group or transaction
    coordinator (a fresh cluster loading ``__consumer_offsets``, a coordinator's node failing over):
    Kafka's Java clients retry these, so strom does too."""
    return error.retriable() or error.code() in COORDINATOR_MOVING


def end_consumer(bootstrap_servers: str, **overrides: Any) -> Consumer:
    """A read_committed consumer that reports the end of each partition, for ``read_to_end``
    (its group is never used: partitions are assigned by hand)."""
    return clients.consumer(bootstrap_servers, **{"enable.partition.eof": True, **overrides})


def partitions_of(consumer: Consumer, topic: str, timeout_s: float = METADATA_TIMEOUT_S,
                  kind: str = "Topic") -> list[int]:
    """The partition numbers of ``topic``, sorted; errors call it ``kind`` (e.g. "Global table topic")."""
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except Exception as exc:
        raise BrokerUnavailableError(f"Could not read the metadata of {kind.lower()} {topic!r}: {exc}. "
                                     "Check that the broker is running.") from exc
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise UnknownTopicError(f"{kind} {topic!r} does not exist; create it before starting the "
                                "application.")
    return sorted(metadata.partitions)


def end_offset(consumer: Consumer, topic: str, partition: int, timeout_s: float = METADATA_TIMEOUT_S) -> int:
    """The partition's log end (high watermark) as the broker knows it now, not as last cached."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout_s, cached=False)[1]
    except Exception as exc:
        raise BrokerUnavailableError(f"Could not read the end of {topic}-{partition}: {exc}. "
                                     "Check that the broker is running.") from exc


def committed_offsets(consumer: Consumer, group: str, partitions: Iterable[tuple[str, int]],
                      timeout_s: float = METADATA_TIMEOUT_S) -> dict[tuple[str, int], int]:
    """What ``group`` (the consumer's own) has committed for ``partitions``; those without a commit are
    left out."""
    try:
        committed = fetch_committed(consumer, [TopicPartition(t, p) for t, p in partitions], timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailableError(f"Could not read the committed offsets of group {group!r}: {exc}. "
                                     "Check that the broker is running.") from exc
    return {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0}


def fetch_committed(consumer: Consumer, partitions: list[TopicPartition],
                    timeout_s: float = METADATA_TIMEOUT_S) -> list[TopicPartition]:
    """``consumer.committed(partitions)`` (offsets with their metadata), asked again while the group
    coordinator moves, loads (``coordinator_moving``) or does not answer until ``timeout_s`` passed; other
    Kafka errors raise ``KafkaException``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.committed(partitions, max(0.1, min(ASK_COMMITTED_S, deadline - time.monotonic())))
        except KafkaException as exc:
            timed_out = exc.args[0].code() == KafkaError._TIMED_OUT
            if timed_out and (refused := _group_refused(consumer)) is not None:
                raise KafkaException(refused) from exc
            if not asked_again(exc.args[0]) or time.monotonic() >= deadline:
                raise
            time.sleep(COORDINATOR_BACKOFF_S)


def asked_again(error: KafkaError) -> bool:
    """Whether ``fetch_committed`` asks again after ``error`` (a coordinator moving, loading or not
    answering) until its timeout, rather than raising it at once."""
    return error.code() == KafkaError._TIMED_OUT or coordinator_moving(error)


def _group_refused(consumer: Consumer) -> KafkaError | None:
    """GROUP_AUTHORIZATION_FAILED if the cluster refused the consumer's group: librdkafka's committed()
    then only times out, and the refusal waits in the consumer's queue. Looked for only while nothing is
    assigned, so that no record is taken from the queue."""
    if consumer.assignment():
        return None
    for event in consumer.consume(100, 0):
        error = event.error()
        if error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return error
    return None


def read_to_end(consumer: Consumer, partitions: Iterable[TopicPartition], what: str = "",
                stall_timeout_s: float = STALL_TIMEOUT_S) -> Iterator[Message]:
    """Every record of ``partitions`` (each a TopicPartition whose offset is where to start, e.g.
    ``OFFSET_BEGINNING``) up to the end of each, in offset order per partition; ``read_batches``
    one by one."""
    with closing(read_batches(consumer, partitions, what, stall_timeout_s)) as batches:
        for batch in batches:
            yield from batch


def read_batches(consumer: Consumer, partitions: Iterable[TopicPartition], what: str = "",
                 stall_timeout_s: float = STALL_TIMEOUT_S) -> Iterator[list[Message]]:
    """The records of ``partitions`` up to the end of each, as the lists the consumer hands over (at
    most ``BATCH`` records each, offset order per partition, no error or end events): a restore applies
    a list at once instead of handling one record per call.

    Raises BrokerUnavailableError, naming ``what`` (e.g. "changelog app-counts-changelog-0"), when
    no record and no end arrived for ``stall_timeout_s`` or the consumer reports a fatal or
    non-retriable error (retriable ones librdkafka retries itself). The partitions are unassigned
    when the read ends, also when the caller stops early.
    """
    assigned = list(partitions)
    if not assigned:
        return
    what = what or ", ".join(f"{tp.topic}-{tp.partition}" for tp in assigned)
    pending = {(tp.topic, tp.partition) for tp in assigned}
    clients.assign(consumer, assigned)
    last_progress = time.monotonic()
    try:
        with _fewer_collections():
            while pending:
                # what is fetched already, at once; else wait for the next record or end (a message
                # is false when its value is empty: compare with None)
                messages = consumer.consume(BATCH, 0) or [m for m in [consumer.poll(POLL_S)]
                                                          if m is not None]
                if not messages:
                    if time.monotonic() - last_progress > stall_timeout_s:
                        raise BrokerUnavailableError(f"Reading {what} made no progress for "
                                                     f"{stall_timeout_s:.0f}s; check that the broker "
                                                     "is running.")
                    continue
                last_progress = time.monotonic()
                records = [message for message in messages if message.error() is None]
                if len(records) < len(messages):
                    _events(consumer, messages, pending, what)
                if records:
                    yield records
    finally:
        consumer.unassign()


def _events(consumer: Consumer, messages: list[Message], pending: set[tuple[str, int]], what: str) -> None:
    """Ends of partitions leave ``pending``; a missing ACL raises AuthorizationError (the group's is
    Describe: a reader only looks its coordinator up), another fatal or non-retriable error
    BrokerUnavailableError."""
    for message in messages:
        error = message.error()
        if error is None:
            continue
        if error.code() == KafkaError._PARTITION_EOF:
            pending.discard((message.topic(), message.partition()))
            continue
        who = identity_of(consumer)
        refused = refusal(who, error, topic=message.topic() or ", ".join(sorted({t for t, _ in pending})),
                          group=who.get("group.id", "?"), group_operation="Describe")
        if refused is not None:
            raise refused
        if error.fatal() or not error.retriable():
            raise BrokerUnavailableError(f"Reading {what} failed: {error.str()}.")


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """Collect Python's youngest generation every ``YOUNG_COLLECTION_OBJECTS`` new objects while reads
    run. Every fetched message is an object the collector tracks, and a reader keeps a fetch's ten
    thousand alive until it has applied them: with the default threshold (700) they went through every
    generation, and a full collection over all of the process's objects ran every few fetches, a fifth
    to a third of a restore's time. The process's thresholds come back when the last read ends (unless
    something else changed them meanwhile)."""
    global _gc_readers, _gc_thresholds
    with _gc_lock:
        if _gc_readers == 0:
            before = gc.get_threshold()
            raised = (max(before[0], YOUNG_COLLECTION_OBJECTS), *before[1:])
            gc.set_threshold(*raised)
            _gc_thresholds = before, raised
        _gc_readers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_readers -= 1
            if _gc_readers == 0 and _gc_thresholds is not None:
                before, raised = _gc_thresholds
                if gc.get_threshold() == raised:
                    gc.set_threshold(*before)
                _gc_thresholds = None
