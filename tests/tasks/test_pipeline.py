"""Processor pipelines within one partition (no broker): push to the next processor, deferred
completion across stages, errors, and the pending limit of the backlog."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Message

from strom.errors import ConfigError
from strom.tasks.completion import Completion
from strom.tasks.context import Record, TaskMetadata, record_of
from strom.tasks.partition import IgnoredKeys, PartitionContext
from strom.tasks.processors import ProcessorsBuilder, ProcessorScope
from strom.tasks.properties import ProcessorPropertiesView, StaticPropertySupplier


def fetched(offset: int, key: bytes | None, value: bytes) -> Record:
    """A record as the subscription hands it over, from a real confluent_kafka.Message."""
    return record_of(Message(topic="t", partition=0, offset=offset, key=key, value=value,
                             timestamp=(1, 1000 + offset)))


def _context(builder: ProcessorsBuilder, **props: int) -> PartitionContext:
    view = ProcessorPropertiesView([StaticPropertySupplier(props)])
    return PartitionContext("t", 0, builder, view, None, None, IgnoredKeys(view))


def _wait(ctx: PartitionContext, predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ctx.update()
        if predicate():
            return True
        time.sleep(0.005)
    return False


def test_push_and_deferred_completion_in_a_later_stage_hold_the_offset() -> None:
    held: list[Completion] = []
    seen: list[tuple[str, int]] = []

    def parse(context, task: bytes) -> None:
        seen.append(("parse", context.metadata().offset))
        context.push(int(task))

    def send(context, task: int) -> None:
        seen.append(("send", task))
        if task == 1:
            held.append(context.defer_completion())

    ctx = _context(ProcessorsBuilder.consuming("t").then_process(parse).then_process(send))
    ctx.add_records([fetched(o, b"k", str(o).encode()) for o in range(3)])
    assert _wait(ctx, lambda: len(seen) == 6)
    ctx.update()
    assert ctx.commit_control.commit_ready_offset() == 0  # offset 1 waits for its deferred send
    assert ctx.offset_waiting_commit() == 1
    threading.Thread(target=held[0].complete).start()
    assert _wait(ctx, lambda: ctx.commit_control.commit_ready_offset() == 2)
    assert seen == [("parse", 0), ("send", 0), ("parse", 1), ("send", 1), ("parse", 2), ("send", 2)]
    ctx.close()


def test_a_raising_processor_or_deserializer_does_not_block_the_partition(caplog) -> None:
    def fail_on_two(context, task: int) -> None:
        if task == 2:
            raise RuntimeError("boom")

    ctx = _context(ProcessorsBuilder.consuming("t", int).then_process(fail_on_two))
    ctx.add_records([fetched(0, None, b"1"), fetched(1, None, b"2"),
                     fetched(2, None, b"not a number"), fetched(3, None, b"4")])
    assert _wait(ctx, lambda: ctx.commit_control.commit_ready_offset() == 3)
    assert "boom" in caplog.text and "t-0@2" in caplog.text
    ctx.close()


def test_records_over_the_pending_limit_wait_in_the_backlog() -> None:
    gate = threading.Event()
    started: list[int] = []

    def blocked(context, task: bytes) -> None:
        started.append(context.metadata().offset)
        gate.wait(5)

    ctx = _context(ProcessorsBuilder.consuming("t").then_process(blocked),
                   **{"decaton.max.pending.records": 5, "decaton.partition.concurrency": 10})
    ctx.add_records([fetched(o, str(o).encode(), b"x") for o in range(12)])
    ctx.update()
    assert ctx.pending() == 5 and ctx.should_pause()
    assert ctx.snapshot().pending == 12  # five handed over, seven waiting
    gate.set()
    assert _wait(ctx, lambda: ctx.commit_control.commit_ready_offset() == 11)
    assert sorted(started) == list(range(12)) and not ctx.should_pause()
    ctx.close()


def test_context_reads_metadata_key_and_headers_of_the_fetched_record() -> None:
    seen: list[tuple[TaskMetadata, bytes | None, list, bytes]] = []
    ctx = _context(ProcessorsBuilder.consuming("t").then_process(
        lambda context, task: seen.append((context.metadata(), context.key(), context.headers(), task))))
    ctx.add_records([fetched(7, b"k7", b"v7"), fetched(8, None, b"v8")])
    assert _wait(ctx, lambda: ctx.commit_control.commit_ready_offset() == 8)
    assert seen == [(TaskMetadata("t", 0, 7, 1007), b"k7", [], b"v7"),
                    (TaskMetadata("t", 0, 8, 1008), None, [], b"v8")]
    ctx.close()


def test_partition_pauses_once_the_backlog_holds_max_pending_and_resumes_at_half() -> None:
    """librdkafka drops prefetched records of a paused partition: pausing waits for a full backlog."""
    held: dict[int, Completion] = {}
    ctx = _context(ProcessorsBuilder.consuming("t").then_process(
        lambda context, task: held.setdefault(context.metadata().offset, context.defer_completion())),
        **{"decaton.max.pending.records": 4, "decaton.partition.concurrency": 4})
    ctx.add_records([fetched(o, str(o).encode(), b"x") for o in range(7)])
    assert _wait(ctx, lambda: len(held) == 4)
    assert ctx.pending() == 4 and not ctx.should_pause()  # three wait in the backlog, fetching goes on
    ctx.add_records([fetched(7, b"7", b"x")])
    assert ctx.should_pause()  # the backlog holds max.pending.records
    ctx.paused = True
    for offset, backlog_left, paused in ((0, 3, True), (1, 2, False)):
        held[offset].complete()
        assert _wait(ctx, lambda n=offset: len(held) == n + 5)  # the freed slot took a backlog record
        assert ctx.snapshot().pending == 4 + backlog_left and ctx.should_pause() is paused
    for offset in range(2, 8):
        assert _wait(ctx, lambda n=offset: n in held)
        held[offset].complete()
    assert _wait(ctx, lambda: ctx.commit_control.commit_ready_offset() == 7)
    ctx.close()


class Counter:
    """Not thread-safe on purpose: one instance must see one thread."""

    made: list[Counter] = []

    def __init__(self) -> None:
        self.threads: set[int] = set()
        self.tasks = 0
        self.closed = False
        Counter.made.append(self)

    def process(self, context, task) -> None:
        self.threads.add(threading.get_ident())
        self.tasks += 1

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("scope, instances", [(ProcessorScope.PARTITION, 1), (ProcessorScope.THREAD, 4)])
def test_scoped_processors_are_made_per_partition_or_unit_thread_and_closed(scope, instances) -> None:
    Counter.made.clear()
    ctx = _context(ProcessorsBuilder.consuming("t").then_process(Counter, scope),
                   **{"decaton.partition.concurrency": 4})
    # 64 keys: every one of the 4 units gets some (keys are spread by Python's per-process hash)
    ctx.add_records([fetched(o, f"k{o % 64}".encode(), b"v") for o in range(200)])
    assert _wait(ctx, lambda: ctx.commit_control.commit_ready_offset() == 199)
    ctx.close()
    assert len(Counter.made) == instances and sum(c.tasks for c in Counter.made) == 200
    assert all(c.closed for c in Counter.made)
    if scope is ProcessorScope.THREAD:
        assert all(len(c.threads) == 1 for c in Counter.made)


def test_scoped_processors_need_a_factory() -> None:
    with pytest.raises(ConfigError, match="takes a factory"):
        ProcessorsBuilder.consuming("t").then_process(Counter(), ProcessorScope.PARTITION)
    with pytest.raises(ConfigError, match="called without arguments"):
        ProcessorsBuilder.consuming("t").then_process(lambda context, task: None, ProcessorScope.THREAD)

    class AsyncWorker:
        async def process(self, context, task) -> None:
            pass

    with pytest.raises(ConfigError, match=r"ProcessorScope\.PARTITION"):
        ProcessorsBuilder.consuming("t").then_process(AsyncWorker, ProcessorScope.THREAD)
    assert ProcessorsBuilder.consuming("t").then_process(AsyncWorker, ProcessorScope.PARTITION).asynchronous
