"""Interactive queries v2 (Kafka's IQv2, KIP-796): what to ask a store and what comes back.

``StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("spark"))`` asks every partition
of a store (or ``with_partitions``) one query; the answer is a ``StateQueryResult``, one
``QueryResult`` per partition, each with the ``Position`` of the store it was read from: per input
topic partition, the offset of the last record whose effect the answer includes. A caller that wrote
a record at offset ``o`` asks ``with_position_bound(PositionBound.at(Position.empty()
.with_component(topic, partition, o)))`` to read its own write (read-your-writes); a store not yet
there answers NOT_UP_TO_BOUND instead of an older value.

Every type here is plain data (frozen, picklable): a runtime ships requests to the processes that
hold the stores and results back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from strom.errors import ConfigError, InvalidStateStoreError

__all__ = [
    "FailureReason",
    "HostInfo",
    "KeyQuery",
    "KeyQueryMetadata",
    "MultiVersionedKeyQuery",
    "Position",
    "PositionBound",
    "Query",
    "QueryResult",
    "RangeQuery",
    "StateQueryRequest",
    "StateQueryResult",
    "StreamsMetadata",
    "TimestampedKeyQuery",
    "TimestampedRangeQuery",
    "VersionedKeyQuery",
    "WindowKeyQuery",
    "WindowRangeQuery",
]


@dataclass(frozen=True)
class Position:
    """Per topic and partition, the offset of the last input record an answer's store includes."""

    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> Position:
        return cls({})

    @classmethod
    def from_map(cls, offsets: Mapping[str, Mapping[int, int]]) -> Position:
        return cls({topic: dict(parts) for topic, parts in offsets.items()})

    @classmethod
    def of_partitions(cls, offsets: Mapping[tuple[str, int], int]) -> Position:
        """From (topic, partition) -> offset."""
        nested: dict[str, dict[int, int]] = {}
        for (topic, partition), offset in offsets.items():
            nested.setdefault(topic, {})[partition] = offset
        return cls(nested)

    def with_component(self, topic: str, partition: int, offset: int) -> Position:
        """This position with ``topic``-``partition`` at ``offset`` (a later offset wins)."""
        return self.merge(Position({topic: {partition: offset}}))

    def merge(self, other: Position) -> Position:
        """Both positions, the later offset of each topic partition."""
        merged = {topic: dict(parts) for topic, parts in self.offsets.items()}
        for topic, parts in other.offsets.items():
            mine = merged.setdefault(topic, {})
            for partition, offset in parts.items():
                mine[partition] = max(offset, mine.get(partition, offset))
        return Position(merged)

    @property
    def topics(self) -> set[str]:
        return set(self.offsets)

    def get_partition_positions(self, topic: str) -> dict[int, int]:
        return dict(self.offsets.get(topic, {}))

    def is_empty(self) -> bool:
        return not any(self.offsets.values())

    def dominates(self, bound: Position, partition: int | None = None) -> bool:
        """True when this position is at or past ``bound`` in every topic partition ``bound`` names; with
        ``partition``, only in that partition of each topic (as Kafka checks a store partition's
        position: a task reads its own partition of each input topic)."""
        return all(self.offsets.get(topic, {}).get(p, -1) >= offset
                   for topic, parts in bound.offsets.items() for p, offset in parts.items()
                   if partition is None or p == partition)

    def to_json(self) -> dict[str, dict[str, int]]:
        return {topic: {str(p): o for p, o in sorted(parts.items())}
                for topic, parts in sorted(self.offsets.items())}


@dataclass(frozen=True)
class PositionBound:
    """How fresh an answer must be: ``unbounded()`` (any), or ``at(position)``."""

    position: Position | None = None

    @classmethod
    def unbounded(cls) -> PositionBound:
        return cls(None)

    @classmethod
    def at(cls, position: Position) -> PositionBound:
        if not isinstance(position, Position):
            raise ConfigError(f"PositionBound.at takes a Position, not {position!r}: build one with "
                              "Position.empty().with_component(topic, partition, offset).")
        return cls(position)

    @property
    def is_unbounded(self) -> bool:
        return self.position is None

    def allows(self, position: Position, partition: int | None = None) -> bool:
        """Whether a store partition at ``position`` may answer (``partition``: see ``dominates``)."""
        return self.position is None or position.dominates(self.position, partition)


class Query:
    """A query a store answers; the subclasses are Kafka's IQv2 query types."""


@dataclass(frozen=True)
class KeyQuery(Query):
    """The key's value (plain, also from a timestamped store); None when absent."""

    key: Any

    @classmethod
    def with_key(cls, key: Any) -> KeyQuery:
        return cls(_not_none(key, "KeyQuery.with_key"))

    def skip_cache(self) -> KeyQuery:
        """Kafka's cache bypass: strom always reads committed state, below the record cache."""
        return self


@dataclass(frozen=True)
class TimestampedKeyQuery(KeyQuery):
    """The key's ``ValueAndTimestamp`` from a timestamped key-value store (KIP-992)."""


@dataclass(frozen=True)
class RangeQuery(Query):
    """Entries with lower <= key <= upper (None: unbounded), as (key, value) pairs in key order."""

    lower: Any = None
    upper: Any = None
    descending: bool = False

    @classmethod
    def with_range(cls, lower: Any, upper: Any) -> RangeQuery:
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls, lower: Any) -> RangeQuery:
        return cls(lower, None)

    @classmethod
    def with_upper_bound(cls, upper: Any) -> RangeQuery:
        return cls(None, upper)

    @classmethod
    def with_no_bounds(cls) -> RangeQuery:
        return cls()

    def with_descending_keys(self) -> RangeQuery:
        return replace(self, descending=True)

    def with_ascending_keys(self) -> RangeQuery:
        return replace(self, descending=False)


@dataclass(frozen=True)
class TimestampedRangeQuery(RangeQuery):
    """``RangeQuery`` with ``ValueAndTimestamp`` values, from a timestamped key-value store."""


@dataclass(frozen=True)
class WindowKeyQuery(Query):
    """A window store's windows of one key starting in [time_from, time_to]: (window start, value)."""

    key: Any
    time_from: int
    time_to: int

    @classmethod
    def with_key_and_window_start_range(cls, key: Any, time_from: int, time_to: int) -> WindowKeyQuery:
        return cls(_not_none(key, "WindowKeyQuery"), _millis(time_from), _millis(time_to))


@dataclass(frozen=True)
class WindowRangeQuery(Query):
    """``with_window_start_range(from, to)``: every key's windows starting then, from a window store, as
    (Windowed key, value); ``with_key(k)``: every session of ``k`` from a session store."""

    key: Any = None
    time_from: int | None = None
    time_to: int | None = None

    @classmethod
    def with_key(cls, key: Any) -> WindowRangeQuery:
        return cls(key=_not_none(key, "WindowRangeQuery.with_key"))

    @classmethod
    def with_window_start_range(cls, time_from: int, time_to: int) -> WindowRangeQuery:
        return cls(time_from=_millis(time_from), time_to=_millis(time_to))


@dataclass(frozen=True)
class VersionedKeyQuery(Query):
    """A versioned store's latest version of the key, or the one valid ``as_of`` a time."""

    key: Any
    as_of_timestamp: int | None = None

    @classmethod
    def with_key(cls, key: Any) -> VersionedKeyQuery:
        return cls(_not_none(key, "VersionedKeyQuery.with_key"))

    def as_of(self, timestamp: int) -> VersionedKeyQuery:
        return replace(self, as_of_timestamp=_millis(timestamp))


@dataclass(frozen=True)
class MultiVersionedKeyQuery(Query):
    """The key's versions valid at some time in [from_time, to_time], newest first unless ascending."""

    key: Any
    time_from: int | None = None
    time_to: int | None = None
    ascending: bool = False

    @classmethod
    def with_key(cls, key: Any) -> MultiVersionedKeyQuery:
        return cls(_not_none(key, "MultiVersionedKeyQuery.with_key"))

    def from_time(self, timestamp: int) -> MultiVersionedKeyQuery:
        return replace(self, time_from=_millis(timestamp))

    def to_time(self, timestamp: int) -> MultiVersionedKeyQuery:
        return replace(self, time_to=_millis(timestamp))

    def with_ascending_timestamps(self) -> MultiVersionedKeyQuery:
        return replace(self, ascending=True)

    def with_descending_timestamps(self) -> MultiVersionedKeyQuery:
        return replace(self, ascending=False)


@dataclass(frozen=True)
class StateQueryRequest:
    """One query to the partitions of one store, and how fresh and from where it may be answered."""

    store_name: str
    query: Query | None = None
    partitions: frozenset[int] | None = None
    """None: every partition."""
    position_bound: PositionBound = field(default_factory=PositionBound.unbounded)
    active_only: bool = False
    execution_info: bool = False

    @classmethod
    def in_store(cls, name: str) -> _InStore:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"Invalid store name {name!r}: pass the name the store was built with.")
        return _InStore(name)

    def with_partitions(self, partitions: Iterable[int]) -> StateQueryRequest:
        chosen = frozenset(partitions)
        if any(not isinstance(p, int) or p < 0 for p in chosen):
            raise ConfigError(f"Invalid partitions {sorted(chosen, key=str)}: expected numbers >= 0.")
        return replace(self, partitions=chosen)

    def with_all_partitions(self) -> StateQueryRequest:
        return replace(self, partitions=None)

    def with_position_bound(self, bound: PositionBound) -> StateQueryRequest:
        if not isinstance(bound, PositionBound):
            raise ConfigError(f"with_position_bound takes a PositionBound, not {bound!r}.")
        return replace(self, position_bound=bound)

    def require_active(self) -> StateQueryRequest:
        """Only active tasks answer; without it a standby may (its answer can be older)."""
        return replace(self, active_only=True)

    def enable_execution_info(self) -> StateQueryRequest:
        return replace(self, execution_info=True)

    def is_all_partitions(self) -> bool:
        return self.partitions is None


@dataclass(frozen=True)
class _InStore:
    store_name: str

    def with_query(self, query: Query) -> StateQueryRequest:
        if not isinstance(query, Query):
            raise ConfigError(f"{query!r} is not a query: pass KeyQuery.with_key(k), RangeQuery.with_range("
                              "a, b), WindowKeyQuery, WindowRangeQuery, VersionedKeyQuery or "
                              "MultiVersionedKeyQuery.")
        return StateQueryRequest(self.store_name, query)


class FailureReason(Enum):
    """Why a partition did not answer (Kafka's ``FailureReason``). NOT_PRESENT, NOT_ACTIVE and
    NOT_UP_TO_BOUND are retriable: the partition is moving or catching up."""

    UNKNOWN_QUERY_TYPE = "UNKNOWN_QUERY_TYPE"
    NOT_ACTIVE = "NOT_ACTIVE"
    NOT_UP_TO_BOUND = "NOT_UP_TO_BOUND"
    NOT_PRESENT = "NOT_PRESENT"
    DOES_NOT_EXIST = "DOES_NOT_EXIST"
    STORE_EXCEPTION = "STORE_EXCEPTION"

    @property
    def retriable(self) -> bool:
        return self in (FailureReason.NOT_PRESENT, FailureReason.NOT_ACTIVE, FailureReason.NOT_UP_TO_BOUND)


@dataclass(frozen=True)
class QueryResult:
    """One partition's answer: a result, or a failure reason and message; its store's position."""

    result: Any = None
    failure_reason: FailureReason | None = None
    failure_message: str = ""
    position: Position = field(default_factory=Position.empty)
    standby: bool = False
    """Answered by a standby replica (the caller allowed it): possibly older than the active's."""
    execution_info: tuple[str, ...] = ()

    @classmethod
    def for_result(cls, result: Any, position: Position, standby: bool = False) -> QueryResult:
        return cls(result, position=position, standby=standby)

    @classmethod
    def for_failure(cls, reason: FailureReason, message: str,
                    position: Position | None = None) -> QueryResult:
        return cls(failure_reason=reason, failure_message=message, position=position or Position.empty())

    def is_success(self) -> bool:
        return self.failure_reason is None

    def is_failure(self) -> bool:
        return self.failure_reason is not None

    def get_result(self) -> Any:
        """The result; a failed query raises InvalidStateStoreError with its reason and message."""
        if self.failure_reason is not None:
            raise InvalidStateStoreError(f"{self.failure_reason.value}: {self.failure_message}")
        return self.result


@dataclass
class StateQueryResult:
    """The answers of the partitions asked, by partition (a global store's: ``global_result``)."""

    partition_results: dict[int, QueryResult] = field(default_factory=dict)
    global_result: QueryResult | None = None

    def get_only_partition_result(self) -> QueryResult:
        """The one successful partition's answer (a key query: the partition that has the key)."""
        done = [r for r in self.partition_results.values() if r.is_success()]
        if len(done) != 1:
            raise InvalidStateStoreError(f"Expected one successful partition result, got {len(done)} of "
                                         f"{len(self.partition_results)}: ask with_partitions([p]).")
        return done[0]

    def get_position(self) -> Position:
        merged = Position.empty()
        for result in [*self.partition_results.values(), *filter(None, [self.global_result])]:
            merged = merged.merge(result.position)
        return merged

    def failures(self) -> dict[int, QueryResult]:
        return {p: r for p, r in self.partition_results.items() if r.is_failure()}


@dataclass(frozen=True)
class HostInfo:
    """Where a task's stores are served: a query endpoint (host, port)."""

    host: str
    port: int

    @classmethod
    def unavailable(cls) -> HostInfo:
        return cls("unavailable", -1)


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Which partition holds a key and which endpoints serve it (Kafka's ``KeyQueryMetadata``)."""

    active_host: HostInfo
    standby_hosts: frozenset[HostInfo]
    partition: int


@dataclass(frozen=True)
class StreamsMetadata:
    """One endpoint and what it serves of the asked store: its active and standby partitions."""

    host_info: HostInfo
    state_store_names: frozenset[str]
    active_partitions: frozenset[int]
    standby_partitions: frozenset[int]


def _not_none(key: Any, what: str) -> Any:
    if key is None:
        raise ConfigError(f"{what} needs a key, got None.")
    return key


def _millis(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"Expected a time in epoch milliseconds (int), got {value!r}.")
    return value
