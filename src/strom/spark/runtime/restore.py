"""Brings a task's stores up to the end of their changelogs (read_committed) before it processes.

Each store knows the changelog offset its local data reached (its checkpoint); only the records
after it are replayed. Under exactly-once the task's producer has already called
``init_transactions``, so no transaction of this task is open and the log end is stable.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from strom.errors import BrokerUnavailableError
from strom.streams.processor.internals.task import StreamTask

_TIMEOUT_S = 30.0
_BATCH = 10_000
STALL_TIMEOUT_S = 120.0


def restore_task(task: StreamTask, consumer: Consumer, stores: Collection[str] | None = None,
                 log_ends: dict[str, int] | None = None) -> int:
    """Replays the changelog tail of every logged store (or of those named in ``stores``) into
    it; returns the number of records applied.

    ``consumer`` must read committed data with ``enable.partition.eof`` on. ``log_ends`` (store
    -> its changelog's end when last read to it, kept by the caller across calls) skips a
    changelog that has not grown since: under exactly-once its end lies past the last record
    (the commit marker), so the offset alone would read it again each time.
    """
    restored = 0
    ends = {} if log_ends is None else log_ends
    offsets = task.restore_offsets()
    for store, tp in task.changelog_partitions().items():
        if stores is not None and store not in stores:
            continue
        start = offsets[store]
        partition = TopicPartition(tp.topic, tp.partition)
        try:
            _, high = consumer.get_watermark_offsets(partition, _TIMEOUT_S, cached=False)
        except Exception as exc:
            raise BrokerUnavailableError(f"Could not read the end of changelog {tp}: {exc}. "
                                         "Check that the broker is running.") from exc
        if not ((start is not None and start >= high) or ends.get(store) == high):
            restored += task.restore(store, _records(consumer, tp.topic, tp.partition,
                                                     OFFSET_BEGINNING if start is None else start))
        ends[store] = high
    return restored


def _records(consumer: Consumer, topic: str, partition: int, start: int) -> Iterator[tuple]:
    consumer.assign([TopicPartition(topic, partition, start)])
    last_progress = time.monotonic()
    try:
        while True:
            messages = consumer.consume(_BATCH, 0) or [m for m in [consumer.poll(1.0)] if m is not None]
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise BrokerUnavailableError(f"Restoring from changelog {topic}-{partition} made no "
                                             f"progress for {STALL_TIMEOUT_S:.0f}s; check the broker.")
            for message in messages:
                error = message.error()
                if error is None:
                    yield message.key(), message.value(), message.offset(), message.timestamp()[1]
                elif error.code() == KafkaError._PARTITION_EOF:
                    return
                elif error.fatal() or not error.retriable():
                    raise BrokerUnavailableError(f"Restoring from changelog {topic}-{partition} "
                                                 f"failed: {error.str()}.")
    finally:
        consumer.unassign()
