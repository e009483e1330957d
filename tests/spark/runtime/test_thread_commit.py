"""A stream thread's exactly-once commit (``StreamThread._commit_transaction``), without Spark, on strom
broker: the offsets go into the transaction while the tasks flush their caches; sent again when the flush
changed their metadata (a processor downstream of a cache writing processor metadata); and when the flush
fails while the offsets failed too, the offsets' error is the one raised, so a fence is still a fence."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from strom.errors import ProcessingError, ProducerFencedError
from strom.kafka import clients
from strom.kafka.transactional import fenced
from strom.spark.runtime.plan import create_internal_topics, plan_application
from strom.spark.runtime.thread import StreamThread, ThreadPlan, transactional_id
from strom.streams import Consumed, Materialized, Produced, StreamsBuilder
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.api import Processor, Record
from strom.streams.processor.internals.partition_group import decode_commit_metadata

from .conftest import produce_lines, read_updates
from .wordcount import L, S

pytestmark = [pytest.mark.broker]


class _NotesWhatTheCacheFlushed(Processor):
    """Downstream of a cached count: writes processor metadata only when the cache forwards, i.e. while a
    commit flushes it; raises instead if ``FAILING`` holds its task."""

    FAILING: set[str] = set()

    def process(self, record: Record) -> None:
        if str(self.context.task_id) in self.FAILING:
            raise ValueError("a processor downstream of the cache failed")
        self.context.add_processor_metadata_key_value("flushed", record.value)
        self.context.forward(record)


def _thread(broker, topics, tmp_path, app: str, lines: list[tuple[str, str]]
            ) -> tuple[StreamThread, Any, dict[str, str]]:
    """A stream thread of slot 0 with task 0_0 open (a cached count per key, then the processor above)
    and every record of ``lines`` processed, its transaction open and nothing committed yet."""
    names = topics(source=1, sink=1)
    builder = StreamsBuilder()
    (builder.stream(names["source"], Consumed.with_(S, S)).group_by_key()
        .count(materialized=Materialized.as_("counts")).to_stream()
        .process(_NotesWhatTheCacheFlushed).to(names["sink"], Produced.with_(S, L)))
    topology = builder.build()
    config = StreamsConfig({"application.id": f"{app}-{names['source']}",
                            "bootstrap.servers": broker.bootstrap_servers,
                            "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path)})
    admin = clients.admin(broker.bootstrap_servers)
    create_internal_topics(plan_application(topology, config, admin), admin, broker.bootstrap_servers)
    produce_lines(broker.bootstrap_servers, names["source"], lines)
    plan = ThreadPlan("run", 1, 1, ("127.0.0.1", 0), "", 60.0, {"0_0": (names["source"],)})
    thread = StreamThread(topology, config, plan, 0)
    thread._start_producer()
    thread._open_all(["0_0"])
    consumer = thread._consumer()
    thread._assign(consumer)
    running = thread.tasks["0_0"]
    while running.read.get((names["source"], 0), 0) < len(lines):
        thread._route(consumer.consume(100, 1.0))
    thread.transactions.begin_transaction()
    running.open.task.process_all()
    return thread, consumer, names


def _committed(thread: StreamThread, names: dict[str, str]) -> TopicPartition:
    reader = clients.consumer(thread.config[cfg.BOOTSTRAP_SERVERS], thread.config.application_id)
    try:
        return reader.committed([TopicPartition(names["source"], 0)], timeout=30)[0]
    finally:
        reader.close()


def _close(thread: StreamThread, consumer: Any) -> None:
    consumer.close()
    thread._abort_all()
    thread._background.shutdown()


def test_offsets_are_sent_again_when_the_cache_flush_changed_their_metadata(broker, topics, tmp_path):
    thread, consumer, names = _thread(broker, topics, tmp_path, "commit-resend", [("a", "x")] * 3)
    try:
        thread._commit_all(consumer)
        committed = _committed(thread, names)
        assert committed.offset == 3
        # the offsets first sent (before the flush) had no processor metadata: only the resend carries it
        assert decode_commit_metadata(committed.metadata)[1] == {"flushed": 3}
    finally:
        _close(thread, consumer)
    assert read_updates(broker.bootstrap_servers, names["sink"]) == {"a": [3]}


@pytest.mark.parametrize("fence", [True, False], ids=["fenced", "not-fenced"])
def test_a_flush_failing_while_the_offsets_fail_raises_the_offsets_error(broker, topics, tmp_path, fence):
    """Fenced: the flush fails at once while the offsets are still on their way and then fail
    PRODUCER_FENCED; the fence is what is raised (the thread then ends quietly instead of reopening its
    tasks). Not fenced: the offsets went in, the flush's failure is raised."""
    thread, consumer, names = _thread(broker, topics, tmp_path, "commit-fail", [("a", "x")] * 2)
    _NotesWhatTheCacheFlushed.FAILING.add("0_0")
    try:
        if fence:  # a newer holder of the slot
            other = clients.producer(broker.bootstrap_servers, **{
                "transactional.id": transactional_id(thread.config.application_id, 0)})
            other.init_transactions(30)
        with pytest.raises(ProducerFencedError if fence else ProcessingError) as raised:
            thread._commit_all(consumer)
        assert fenced(raised.value, thread.transactions) is fence
        assert isinstance(raised.value.__cause__ if fence else raised.value, ProcessingError)
    finally:
        _NotesWhatTheCacheFlushed.FAILING.clear()
        _close(thread, consumer)
    assert _committed(thread, names).offset < 0  # nothing committed
