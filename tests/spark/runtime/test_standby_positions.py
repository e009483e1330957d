"""A standby's Position (without Spark): real exactly-once task batches count into a changelog and commit
their offsets on the strom broker; a real StandbyTask (its own state directory) reads the changelog.
Its position is then the committed offsets less one, so a bounded query (read-your-writes) is
answered by the standby once it has applied that far, and refused (NOT_UP_TO_BOUND) before. Offsets that
commit without a changelog write are read when a bounded query asks, or every COMMITTED_EVERY_S; an
update that reads none reads the changelogs' ends once, not again to restore."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strom.kafka.serdes import Serdes
from strom.spark.queries.router import QueryRouter
from strom.spark.queries.server import QueryEndpoint
from strom.spark.runtime import restore as restore_module
from strom.spark.runtime import standby as standby_module
from strom.spark.runtime.control import ThreadMetadata
from strom.spark.runtime.standby import StandbyTask, update_all
from strom.streams import FailureReason, KeyQuery, Position, PositionBound, StateQueryRequest
from strom.streams.config import StreamsConfig
from strom.streams.processor.records import TaskId

from .conftest import produce_lines
from .task_batches import counting_app, run_batch

pytestmark = [pytest.mark.broker]

TOKEN = "standby-positions"


def test_a_standby_answers_a_bounded_query_once_it_applied_the_bound(broker, topics, tmp_path, monkeypatch):
    names = topics(source=1, sink=1)
    bootstrap, source = broker.bootstrap_servers, names["source"]
    topology, config = counting_app(bootstrap, names, str(tmp_path / "active"), "rt-standby-pos",
                                    [("a", "x"), ("b", "x"), ("a", "x"), ("a", "x"), ("b", "x")])
    elsewhere = StreamsConfig({**config.originals, "state.dir": str(tmp_path / "standby")})
    standby = StandbyTask(topology, elsewhere, TaskId.parse("0_0"), "standby-run")
    endpoint = QueryEndpoint(TOKEN, "127.0.0.1", "127.0.0.1")
    endpoint.thread = SimpleNamespace(tasks={}, standbys={"0_0": standby})
    threads = [ThreadMetadata("stream-thread-0", "RUNNING", [], "h", 1, 1, standby_tasks=["0_0"],
                              query_address=endpoint.address)]
    router = QueryRouter(config.application_id, {"counts": (0, 1)}, lambda: (threads, TOKEN),
                         lambda store: Serdes.String().serializer())

    def ask(key: str, offset: int):
        bound = PositionBound.at(Position.empty().with_component(source, 0, offset))
        request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key))
        return router.query(request.with_position_bound(bound)).partition_results[0]

    try:
        update_all([standby])
        assert standby.task.committed_position == {}  # nothing committed yet: no position
        assert ask("a", 0).failure_reason is FailureReason.NOT_UP_TO_BOUND

        run_batch(topology, config, bootstrap, source, 0, 2)  # a, b: offsets 0 and 1 committed
        assert ask("a", 1).failure_reason is FailureReason.NOT_UP_TO_BOUND  # not applied yet
        update_all([standby])
        assert standby.task.committed_position == {(source, 0): 1}
        answer = ask("a", 1)
        assert answer.is_success() and answer.standby and answer.result == 1
        assert answer.position.get_partition_positions(source) == {0: 1}
        assert ask("a", 2).failure_reason is FailureReason.NOT_UP_TO_BOUND

        run_batch(topology, config, bootstrap, source, 2, 5)
        update_all([standby])
        answer = ask("a", 4)
        assert answer.is_success() and answer.standby and answer.result == 3
        assert ask("b", 4).result == 2

        # records that change no state (a count skips null keys): their offsets commit, no changelog
        # grows, so an update does not read the committed offsets, until a bounded query asks for them
        monkeypatch.setattr(standby_module, "COMMITTED_EVERY_S", 3600.0)
        restore_reads: list[str] = []  # changelog ends read to restore (after the look at them)
        look = restore_module.end_offset

        def counted(consumer, topic: str, *rest):
            restore_reads.append(topic)
            return look(consumer, topic, *rest)
        monkeypatch.setattr(restore_module, "end_offset", counted)
        update_all([standby])  # reads what the bounded queries above asked for
        assert len(restore_reads) == 1  # after a committed read: the changelog's end again
        produce_lines(bootstrap, source, [(None, "x")] * 4)
        run_batch(topology, config, bootstrap, source, 5, 7)
        update_all([standby])
        assert standby.task.committed_position == {(source, 0): 4}
        assert len(restore_reads) == 1  # no committed read, the changelog as it was: its end read once
        assert ask("a", 6).failure_reason is FailureReason.NOT_UP_TO_BOUND  # asks the next update to read
        update_all([standby])
        assert standby.task.committed_position == {(source, 0): 6}
        assert len(restore_reads) == 2
        assert ask("a", 6).result == 3
        # ... or until the last read is COMMITTED_EVERY_S old
        update_all([standby])  # reads what that query asked for
        run_batch(topology, config, bootstrap, source, 7, 9)
        update_all([standby])
        assert standby.task.committed_position == {(source, 0): 6}
        monkeypatch.setattr(standby_module, "COMMITTED_EVERY_S", 0.0)
        update_all([standby])
        assert standby.task.committed_position == {(source, 0): 8}
    finally:
        router.close()
        endpoint.close()
        standby.close()
