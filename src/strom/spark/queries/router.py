"""The driver's side of interactive queries: which worker holds which task, and asking it.

The driver assigns the tasks, and each stream thread's hello names its worker's query endpoint
(``ThreadMetadata.query_address``), so the map task -> endpoint is the running batch's assignment:
no state reaches the driver, only answers. A request goes to the endpoints of the active tasks of
the partitions it asks (one message per endpoint, endpoints in parallel); when it allows standbys, a
partition whose active cannot answer (moving, its executor lost) is asked of its standbys. A
partition nobody answers gets NOT_PRESENT, a retriable failure that says why: never an old value
presented as the active's.

A query of one key that names no partitions is routed by its key: the key's partition (the default
partitioner over the store's key serde, as ``query_metadata_for_key`` says) is asked first, and the
other partitions only when it does not hold the key (an input partitioned otherwise).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from strom.errors import InvalidStateStoreError
from strom.spark.queries.channel import Address, Channels
from strom.streams.query.evaluate import TimestampedWindows
from strom.streams.query.requests import (
    FailureReason,
    HostInfo,
    KeyQueryMetadata,
    QueryResult,
    StateQueryRequest,
    StateQueryResult,
    StreamsMetadata,
)

__all__ = ["QueryRouter", "murmur2_partition"]

log = logging.getLogger(__name__)

_FINISHED = "PENDING_SHUTDOWN"
"""A thread whose batch ended (strom.spark.runtime.control.FINISHED, listed until its slot says hello
again): its tasks stay open, parked, in its worker, which answers for them as their active while no
running thread has them (nothing processes them anywhere: another worker opens a task only once this
one has closed it, so its committed state is the latest there is)."""


@dataclass
class _Routes:
    """The running batch's map: task -> the endpoint of its active, and of its standbys."""

    active: dict[str, Address] = field(default_factory=dict)
    standbys: dict[str, list[Address]] = field(default_factory=dict)
    """Standbys of running threads, then the workers that held the task lately (kept open there)."""
    endpoints: list[Address] = field(default_factory=list)


class QueryRouter:
    """Routes IQv2 requests of one application to its workers' query endpoints.

    ``threads`` returns the stream threads of the running batch (``ThreadMetadata``) and the run's
    token (the endpoints' key); ``stores`` maps a store to (sub-topology id, tasks), and global stores
    to None."""

    def __init__(self, application_id: str, stores: dict[str, tuple[int, int] | None],
                 threads: Callable[[], tuple[list[Any], str] | None],
                 key_serializer: Callable[[str], Any]) -> None:
        self.application_id = application_id
        self._stores = stores
        self._threads = threads
        self._key_serializer = key_serializer
        self._serializers: dict[str, Any] = {}
        self._channels = Channels()
        self._held: dict[str, dict[Address, None]] = {}
        """Task -> the endpoints that held it in this run (active or standby), the latest first."""
        self._held_token = ""
        self._lock = threading.Lock()

    # ---- metadata -------------------------------------------------------------------------------
    def store_partitions(self, store_name: str) -> int | None:
        """The partitions (tasks) of a store; None for a global store; an unknown store raises."""
        entry = self._stores_entry(store_name)
        return None if entry is None else entry[1]

    def query_metadata_for_key(self, store_name: str, key: Any, serializer: Any = None) -> KeyQueryMetadata:
        """The partition that holds ``key`` (the default partitioner over the key serialized by
        ``serializer``, else the store's key serde) and the endpoints serving it now."""
        sub, tasks = self._partitioned(store_name)
        serializer = serializer if serializer is not None else self._serializer(store_name)
        partition = murmur2_partition(serializer.serialize(store_name, key), tasks)
        routes = self._routes()[0]
        task = f"{sub}_{partition}"
        active = routes.active.get(task)
        return KeyQueryMetadata(HostInfo(*active) if active else HostInfo.unavailable(),
                                frozenset(HostInfo(*a) for a in routes.standbys.get(task, ())), partition)

    def streams_metadata_for_store(self, store_name: str) -> list[StreamsMetadata]:
        """Each endpoint serving a partition of the store now, with its active and standby partitions."""
        routes = self._routes()[0]
        if self._stores_entry(store_name) is None:  # a global store: every endpoint holds all of it
            return [StreamsMetadata(HostInfo(*a), frozenset([store_name]), frozenset(), frozenset())
                    for a in routes.endpoints]
        sub, _ = self._partitioned(store_name)
        found: dict[Address, tuple[set[int], set[int]]] = {}
        for task, address in routes.active.items():
            if _sub_of(task) == sub:
                found.setdefault(address, (set(), set()))[0].add(_partition_of(task))
        for task, addresses in routes.standbys.items():
            for address in addresses if _sub_of(task) == sub else ():
                found.setdefault(address, (set(), set()))[1].add(_partition_of(task))
        return [StreamsMetadata(HostInfo(*address), frozenset([store_name]), frozenset(a), frozenset(s))
                for address, (a, s) in sorted(found.items())]

    # ---- queries --------------------------------------------------------------------------------
    def query(self, request: StateQueryRequest) -> StateQueryResult:
        routes, token = self._routes()
        if self._stores_entry(request.store_name) is None:
            return self._query_global(request, routes, token)
        sub, tasks = self._partitioned(request.store_name)
        partitions = sorted(range(tasks) if request.partitions is None else request.partitions)
        missing = [p for p in partitions if p >= tasks]
        if missing:
            raise InvalidStateStoreError(f"Store {request.store_name!r} has partitions 0 to {tasks - 1} "
                                         f"(one per task); there is no partition {missing[0]}.")
        result = StateQueryResult()
        first = self._key_partition(request, tasks)
        if first is not None:
            self._query_partitions(request, sub, [first], routes, token, result)
            if _found(result.partition_results[first]):
                return result
        self._query_partitions(request, sub, [p for p in partitions if p != first], routes, token, result)
        return result

    def _query_partitions(self, request: StateQueryRequest, sub: int, partitions: list[int], routes: _Routes,
                          token: str, result: StateQueryResult) -> None:
        """``partitions`` answered into ``result``: by their actives, then (when the request allows) by
        their standbys; a partition nobody answered gets NOT_PRESENT."""
        why = {p: "no stream thread runs its task now (a rebalance, or its executor was lost); retry"
               for p in partitions}
        actives = {p: routes.active.get(f"{sub}_{p}") for p in partitions}
        self._ask(request, sub, actives, result, why, token)
        if not request.active_only:
            retry = [p for p in partitions if not _answered(result, p)]
            for round_ in range(max((len(routes.standbys.get(f"{sub}_{p}", ())) for p in retry), default=0)):
                standbys = {p: _nth(routes.standbys.get(f"{sub}_{p}", ()), round_) for p in retry}
                self._ask(request, sub, standbys, result, why, token, stale=True)
                retry = [p for p in retry if not _answered(result, p)]
        for p in partitions:
            if p not in result.partition_results:
                result.partition_results[p] = QueryResult.for_failure(
                    FailureReason.NOT_PRESENT, f"partition {p} of store {request.store_name!r}: {why[p]}")

    def _key_partition(self, request: StateQueryRequest, tasks: int) -> int | None:
        """The partition of the key a request of one key asks, when it names no partitions; None for
        other requests and for a key the store's key serde cannot serialize (every partition is asked)."""
        query = request.query.query if isinstance(request.query, TimestampedWindows) else request.query
        key = getattr(query, "key", None)
        if request.partitions is not None or key is None:
            return None
        try:
            return murmur2_partition(self._serializer(request.store_name).serialize(request.store_name, key),
                                     tasks)
        except Exception:  # the workers' answers say what is wrong with the key
            return None

    def _serializer(self, store_name: str) -> Any:
        serializer = self._serializers.get(store_name)
        if serializer is None:
            serializer = self._serializers[store_name] = self._key_serializer(store_name)
        return serializer

    def _query_global(self, request: StateQueryRequest, routes: _Routes, token: str) -> StateQueryResult:
        why = "no stream thread runs now; retry"
        for address in routes.endpoints:
            reply = self._exchange(token, {address: (request, [])})[address]
            if not isinstance(reply, Exception):
                return reply
            why = f"{address[0]}:{address[1]}: {reply}"
        return StateQueryResult(global_result=QueryResult.for_failure(FailureReason.NOT_PRESENT, why))

    def _ask(self, request: StateQueryRequest, sub: int, targets: dict[int, Address | None],
             result: StateQueryResult, why: dict[int, str], token: str, stale: bool = False) -> None:
        """Asks each endpoint for its partitions of ``targets`` (at once); keeps every answer but a
        retriable failure over an earlier one; ``stale``: the answers are not the active's (marked
        ``standby``)."""
        by_endpoint: dict[Address, list[int]] = {}
        for partition, address in targets.items():
            if address is not None:
                by_endpoint.setdefault(address, []).append(partition)
        replies = self._exchange(token, {address: (request, [f"{sub}_{p}" for p in ps])
                                         for address, ps in by_endpoint.items()})
        for address, reply in replies.items():
            if isinstance(reply, Exception):
                for p in by_endpoint[address]:
                    why[p] = f"its endpoint {address[0]}:{address[1]} did not answer ({reply}); retry"
                continue
            for p, answer in reply.partition_results.items():
                answer = replace(answer, standby=True) if stale and answer.is_success() else answer
                if answer.is_success() or p not in result.partition_results:
                    result.partition_results[p] = answer
            for p in by_endpoint[address]:
                if p not in reply.partition_results:
                    why[p] = f"its task is not open at {address[0]}:{address[1]} (moving); retry"

    def _exchange(self, token: str, messages: dict[Address, Any]) -> dict[Address, Any]:
        """The endpoints' replies; an endpoint that failed is forgotten as a place of stale answers."""
        replies = self._channels.exchange(token, messages) if messages else {}
        for address, reply in replies.items():
            if isinstance(reply, Exception):
                self._forget(address)
        return replies

    def close(self) -> None:
        self._channels.close()

    # ---- the map --------------------------------------------------------------------------------
    def _routes(self) -> tuple[_Routes, str]:
        found = self._threads()
        routes = _Routes()
        if found is None:
            return routes, ""
        threads, token = found
        parked: dict[str, Address] = {}
        with self._lock:
            if token != self._held_token:
                self._held, self._held_token = {}, token
            for thread in threads:
                address = thread.query_address
                if address is None or thread.thread_state not in ("RUNNING", _FINISHED):
                    continue
                for task in [*thread.active_tasks, *thread.standby_tasks]:
                    self._held[task] = {address: None, **self._held.get(task, {})}  # the latest first
                if thread.thread_state == "RUNNING":
                    routes.endpoints.append(address)
                    routes.active.update({task: address for task in thread.active_tasks})
                    for task in thread.standby_tasks:
                        routes.standbys.setdefault(task, []).append(address)
                else:
                    parked.update(dict.fromkeys(thread.active_tasks, address))
            held = {task: list(addresses) for task, addresses in self._held.items()}
        # between batches a parked worker still holds its global stores: asked after the running ones
        routes.endpoints.extend(a for a in dict.fromkeys(parked.values()) if a not in routes.endpoints)
        for task, address in parked.items():  # no running thread has it: where it is parked
            routes.active.setdefault(task, address)
        for task, addresses in held.items():  # then where it was held lately: parked there, stale
            known = routes.standbys.setdefault(task, [])
            known.extend([a for a in addresses if a not in known and a != routes.active.get(task)])
        return routes, token

    def _forget(self, address: Address) -> None:
        """An endpoint that failed is no longer a place to look for stale answers."""
        with self._lock:
            for addresses in self._held.values():
                addresses.pop(address, None)

    def _stores_entry(self, store_name: str) -> tuple[int, int] | None:
        if store_name not in self._stores:
            raise InvalidStateStoreError(f"No state store {store_name!r} in application "
                                         f"{self.application_id}; its stores are {sorted(self._stores)}.")
        return self._stores[store_name]

    def _partitioned(self, store_name: str) -> tuple[int, int]:
        entry = self._stores_entry(store_name)
        if entry is None:
            raise InvalidStateStoreError(f"Store {store_name!r} is a global store: every instance holds all "
                                         "of it, so it has no partition to choose.")
        return entry


def _answered(result: StateQueryResult, partition: int) -> bool:
    answer = result.partition_results.get(partition)
    return answer is not None and not (answer.is_failure() and answer.failure_reason.retriable)  # type: ignore[union-attr]


def _found(answer: QueryResult) -> bool:
    """The answer holds the key (a value, or a non-empty list of versions, windows or sessions)."""
    found = answer.result
    return answer.is_success() and found is not None and not (isinstance(found, list) and not found)


def _nth(addresses: Iterable[Address], n: int) -> Address | None:
    addresses = list(addresses)
    return addresses[n] if n < len(addresses) else None


def _sub_of(task: str) -> int:
    return int(task.split("_", 1)[0])


def _partition_of(task: str) -> int:
    return int(task.rsplit("_", 1)[1])


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``: murmur2 (seed 0x9747b28c), made
    positive, modulo the partition count."""
    length = len(key)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    if tail:
        rest = key[length - tail:]
        for i in reversed(range(tail)):
            h ^= rest[i] << (8 * i)
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions
