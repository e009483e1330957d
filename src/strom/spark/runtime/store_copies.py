"""Interactive queries on Spark: the driver's own copies of the application's stores.

A stream task's stores live in the Python worker that keeps the task open; the driver cannot
reach them. The driver builds each queried store as the tasks build it, one per task, under
``<state.dir>/<application.id>/query/<task>``, and restores it from the store's changelog exactly as
a task restores its stores (``restore_task``): read_committed under exactly-once, so the copy
holds the state of the task batches committed so far and nothing of an open or aborted one.
Every query without ``enable_stale_stores()`` first reads what the changelogs gained since.
A store whose changelog is a source topic is read up to the group's committed offsets, what the
tasks have processed and committed.
Global stores are read from their topics, as the tasks read them.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from strom.errors import InvalidStateStoreError
from strom.kafka import clients
from strom.kafka.clients import CONNECT_AT_ONCE
from strom.kafka.reading import committed_offsets
from strom.spark.queries.views import check_type
from strom.spark.runtime.open_task import QUICK_EOF, TIMEOUT_S
from strom.spark.runtime.plan import ApplicationPlan, SubtopologyTasks
from strom.spark.runtime.restore import restore_task
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.internals.global_state import GlobalStateStores
from strom.streams.processor.internals.global_state_reader import catch_up
from strom.streams.processor.internals.task import StreamTask
from strom.streams.processor.records import TaskId
from strom.streams.processor.topology import Topology
from strom.streams.query import StoreQueryParameters
from strom.streams.state.cache import ThreadCache

__all__ = ["StoreCopies"]

_NO_SINK: Any = None  # a copy is only restored and read: it never processes, so never sends


class StoreCopies:
    """The driver's copies of one application's stores, built when first queried."""

    def __init__(self, topology: Topology, config: StreamsConfig, plan: ApplicationPlan) -> None:
        self._builder = topology.internal
        self._config = config
        self._plan = plan
        self._dir = Path(config[cfg.STATE_DIR]) / config.application_id / "query"
        shutil.rmtree(self._dir, ignore_errors=True)  # copies of an earlier run may predate a reset
        self._tasks: dict[int, list[StreamTask]] = {}
        self._log_ends: dict[int, dict[str, int]] = {}  # partition -> restore_task's log_ends
        self._globals: GlobalStateStores | None = None
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()

    def store(self, params: StoreQueryParameters) -> Any:
        """The read-only view ``params`` asks for, caught up with the changelogs; with stale stores
        enabled, only a copy never restored is."""
        with self._lock:
            if params.store_name in self._builder.global_stores:
                return self._global_store(params)
            sub = self._subtopology_of(params.store_name)
            check_type(params, self._builder.store_builders[params.store_name])
            partitions = self._partitions(params, sub)
            tasks = self._open(sub)
            for partition in partitions:
                log_ends = self._log_ends.setdefault(partition, {})
                if not params.stale_stores or params.store_name not in log_ends:
                    restore_task(tasks[partition], self._reader(), (params.store_name,), log_ends,
                                 self._committed(tasks[partition], params.store_name))
            stores = [tasks[p].context.stores[params.store_name] for p in partitions]
            return params.query_type.view(params.store_name, stores)

    def close(self) -> None:
        with self._lock:
            for tasks in self._tasks.values():
                for task in tasks:
                    task.close()
            self._tasks.clear()
            self._log_ends.clear()
            if self._globals is not None:
                self._globals.close()
                self._globals = None
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def _subtopology_of(self, name: str) -> SubtopologyTasks:
        owner = next((s for s in self._builder.subtopologies() if name in s.stores), None)
        if owner is None:
            known = sorted([*self._builder.store_builders, *self._builder.global_stores])
            raise InvalidStateStoreError(f"No state store {name!r} in application "
                                         f"{self._config.application_id}; its stores are {known}.")
        sourced = name in self._builder.source_changelogs
        if not sourced and not getattr(self._builder.store_builders[name], "logging_enabled", False):
            raise InvalidStateStoreError(
                f"Store {name!r} has logging disabled, so it cannot be queried: the driver reads a store "
                "from its changelog. Build it with logging enabled (Materialized.with_logging_enabled(), "
                "or with_logging_enabled() on its StoreBuilder).")
        return next(s for s in self._plan.subtopologies if s.id == owner.id)

    @staticmethod
    def _partitions(params: StoreQueryParameters, sub: SubtopologyTasks) -> list[int]:
        if params.partition is None:
            return list(range(sub.tasks))
        if params.partition >= sub.tasks:
            raise InvalidStateStoreError(
                f"Store {params.store_name!r} has partitions 0 to {sub.tasks - 1} (one per task); "
                f"there is no partition {params.partition}.")
        return [params.partition]

    def _open(self, sub: SubtopologyTasks) -> list[StreamTask]:
        """The sub-topology's tasks on the driver, their stores opened but not restored: a copy is
        restored store by store, when queried."""
        tasks = self._tasks.get(sub.id)
        if tasks is None:
            tasks = []
            try:
                for partition in range(sub.tasks):
                    task_id = TaskId(sub.id, partition)
                    tasks.append(StreamTask(task_id, self._builder, self._config, _NO_SINK, ThreadCache(0),
                                            state_dir=self._dir / str(task_id)))
                    tasks[-1].initialize()
            except BaseException:
                for task in tasks:
                    task.close()
                raise
            self._tasks[sub.id] = tasks
        return tasks

    def _global_store(self, params: StoreQueryParameters) -> Any:
        if params.partition is not None:
            raise InvalidStateStoreError(f"Store {params.store_name!r} is a global store: every instance "
                                         "holds all of it, so it has no partition to choose.")
        check_type(params, self._builder.global_stores[params.store_name].store_builder)
        if self._globals is None:
            stores = GlobalStateStores(self._builder.global_stores, self._config, self._dir / "global")
            try:
                catch_up(stores, self._reader())
            except BaseException:
                stores.close()
                raise
            self._globals = stores
        elif not params.stale_stores:
            catch_up(self._globals, self._reader())
        return params.query_type.view(params.store_name, [self._globals.stores[params.store_name]])

    def _committed(self, task: StreamTask, store_name: str) -> dict[tuple[str, int], int]:
        """The application's committed offset of the source partition ``store_name`` restores from
        (none when its changelog is its own)."""
        source = task.source_changelog_partitions().get(store_name)
        if source is None:
            return {}
        return committed_offsets(self._reader(), self._config.application_id, [source], TIMEOUT_S)

    def _reader(self) -> Consumer:
        """One consumer for every catch-up: partitions assigned by hand; it belongs to the
        application's group only to read its committed offsets (it never subscribes or commits)."""
        if self._consumer is None:
            isolation = "read_committed" if self._config.exactly_once else "read_uncommitted"
            self._consumer = clients.consumer(
                self._config[cfg.BOOTSTRAP_SERVERS], group_id=self._config.application_id,
                **{**CONNECT_AT_ONCE, **self._config.client_props("restore.consumer."),
                   "enable.partition.eof": True, **QUICK_EOF, "isolation.level": isolation})
        return self._consumer
