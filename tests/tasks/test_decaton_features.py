"""Decaton's processing features within one partition (no broker): decaton.ignore.keys, TaskExtractor,
the SINGLETON scope, BatchingProcessor, and the per-key quota's rate estimate."""

from __future__ import annotations

import threading
import time

import pytest

from strom.errors import ConfigError
from strom.tasks import (
    BatchingProcessor,
    DecatonTask,
    PerKeyQuotaConfig,
    ProcessorsBuilder,
    ProcessorScope,
    TaskMetadata,
)
from strom.tasks.partition import IgnoredKeys, PartitionContext
from strom.tasks.properties import (
    ProcessorProperties,
    ProcessorPropertiesView,
    Property,
    StaticPropertySupplier,
)
from strom.tasks.quota import KeyCounter, PerKeyQuotaManager
from tasks.test_pipeline import fetched


def _context(builder: ProcessorsBuilder, partition: int = 0, **props) -> PartitionContext:
    view = ProcessorPropertiesView([StaticPropertySupplier(props)])
    return PartitionContext("t", partition, builder, view, None, None, IgnoredKeys(view))


def _done(ctx: PartitionContext, offset: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ctx.update()
        if ctx.commit_control.commit_ready_offset() >= offset:
            return True
        time.sleep(0.005)
    return False


def test_ignored_keys_are_completed_without_processing_and_the_list_reloads() -> None:
    seen: list[bytes] = []
    view = ProcessorPropertiesView([StaticPropertySupplier({"decaton.ignore.keys": "bad, worse"})])
    ignored = IgnoredKeys(view)
    ctx = PartitionContext("t", 0, ProcessorsBuilder.consuming("t").then_process(
        lambda context, task: seen.append(context.key())), view, None, None, ignored)
    ctx.add_records([fetched(0, b"bad", b"v"), fetched(1, b"good", b"v"), fetched(2, b"worse", b"v"),
                     fetched(3, None, b"v")])
    assert _done(ctx, 3)
    assert seen == [b"good", None]
    view.get(ProcessorProperties.IGNORE_KEYS).set('["good"]')  # as a file or topic supplier sends it
    ctx.add_records([fetched(4, b"bad", b"v"), fetched(5, b"good", b"v")])
    assert _done(ctx, 5)
    assert seen == [b"good", None, b"bad"]
    ctx.close()
    with pytest.raises(ConfigError, match=r"decaton\.ignore\.keys"):
        StaticPropertySupplier({"decaton.ignore.keys": [1, 2]})


class Envelope:
    """A TaskExtractor for records whose value is ``<timestamp>|<application>|<payload>``."""

    def __init__(self) -> None:
        self.closed = False

    def extract(self, record) -> DecatonTask[str]:
        timestamp, application, payload = record.value.split(b"|")
        metadata = TaskMetadata(timestamp_ms=int(timestamp), source_application_id=application.decode())
        return DecatonTask(metadata, payload.decode(), payload)

    def close(self) -> None:
        self.closed = True


def test_a_task_extractor_reads_task_and_metadata_of_any_record_format(caplog) -> None:
    seen = []
    extractor = Envelope()
    builder = ProcessorsBuilder.consuming("t", extractor).then_process(
        lambda context, task: seen.append((task, context.metadata())))
    ctx = _context(builder)
    ctx.add_records([fetched(0, b"k", b"77|shop|hello"), fetched(1, b"k", b"no envelope")])
    assert _done(ctx, 1)  # the record the extractor rejects is logged and completed
    ctx.close()
    builder.close()
    assert seen == [("hello", TaskMetadata("t", 0, 0, 77, source_application_id="shop"))]
    assert "t-0@1" in caplog.text and extractor.closed
    with pytest.raises(ConfigError, match="TaskExtractor"):
        ProcessorsBuilder.consuming("t", 42)


class Shared:
    made: list[Shared] = []

    def __init__(self) -> None:
        self.partitions: set[int] = set()
        self.closed = False
        Shared.made.append(self)

    def process(self, context, task) -> None:
        self.partitions.add(context.metadata().partition)

    def close(self) -> None:
        self.closed = True


def test_a_singleton_processor_serves_every_partition_and_closes_with_the_subscription() -> None:
    Shared.made.clear()
    builder = ProcessorsBuilder.consuming("t").then_process(Shared, ProcessorScope.SINGLETON)
    contexts = [_context(builder, partition) for partition in range(3)]
    for ctx in contexts:
        ctx.add_records([fetched(0, b"k", b"v")])
    assert all(_done(ctx, 0) for ctx in contexts)
    for ctx in contexts:
        ctx.close()  # a revoked partition leaves the singleton open
    assert len(Shared.made) == 1 and Shared.made[0].partitions == {0, 1, 2} and not Shared.made[0].closed
    builder.close()
    assert Shared.made[0].closed


class Collect(BatchingProcessor[bytes]):
    def __init__(self, linger_ms, capacity) -> None:
        super().__init__(linger_ms, capacity)
        self.batches: list[list[bytes]] = []
        self.hold = threading.Event()
        self.hold.set()

    def process_batching_tasks(self, batch) -> None:
        self.hold.wait(5)
        self.batches.append([t.task for t in batch])
        for t in batch:
            t.completion.complete()


def test_batching_processor_hands_over_full_batches_and_lingering_ones() -> None:
    batcher = Collect(linger_ms=1_000, capacity=4)
    batcher.hold.clear()
    ctx = _context(ProcessorsBuilder.consuming("t").then_process(batcher))
    ctx.add_records([fetched(o, b"k", str(o).encode()) for o in range(10)])
    time.sleep(0.1)
    ctx.update()
    assert ctx.commit_control.commit_ready_offset() == -1  # a task's offset waits for its batch
    batcher.hold.set()
    assert _done(ctx, 9)
    # full batches go at capacity, the rest when the linger time is up; order and every task kept
    assert [task for batch in batcher.batches for task in batch] == [str(o).encode() for o in range(10)]
    assert all(len(batch) <= 4 for batch in batcher.batches) and [b"0", b"1", b"2", b"3"] in batcher.batches
    batcher.close()
    ctx.close()


def test_batching_processor_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="capacity"):
        Collect(linger_ms=10, capacity=0)
    with pytest.raises(ConfigError, match="linger_ms"):
        Collect(linger_ms=lambda: -1, capacity=1)
    sizes = iter([2, 0])
    batcher = Collect(linger_ms=10, capacity=lambda: next(sizes, 0))  # 0 later: the last good value (2)
    assert batcher._capacity() == 2


def test_count_min_never_underestimates_and_the_manager_flags_bursting_keys() -> None:
    counter = KeyCounter(b"seed", epsilon=0.01, delta=0.01)
    truth = {f"k{i}".encode(): i % 7 + 1 for i in range(2000)}
    for key, n in truth.items():
        counter.increment_and_get(counter.columns(key), n)
    assert all(counter.get(counter.columns(key)) >= n for key, n in truth.items())

    now = [1000.0]
    rate = Property(ProcessorProperties.PER_KEY_QUOTA_PROCESSING_RATE, 10)
    manager = PerKeyQuotaManager(PerKeyQuotaConfig.shape(window_ms=1000), rate, clock=lambda: now[0])
    flagged = []
    for step in range(300):  # 3 s: "hot" 20 tasks/s, "cold" 2 tasks/s
        now[0] = 1000.0 + step / 100
        if step % 5 == 0:
            flagged.append(("hot", manager.record(b"hot")))
        if step % 50 == 0:
            flagged.append(("cold", manager.record(b"cold")))
    assert all(r is None for key, r in flagged if key == "cold")
    hot = [r for key, r in flagged if key == "hot"]
    assert hot[:19] == [None] * 19  # nothing is judged within the first window
    assert all(r is not None and r >= 10 for r in hot[-20:])
    assert manager.record(None) is None
