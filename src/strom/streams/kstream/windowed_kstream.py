"""TimeWindowedKStream and SessionWindowedKStream: ``group_by_key().windowed_by(windows)``.

Their count / reduce / aggregate return a KTable keyed by ``Windowed(key, window)`` whose key serde is
Kafka's windowed layout. Results live in a (timestamped) window store or a session store, RocksDB
unless ``Materialized.as_`` names an in-memory supplier; retention defaults to window size + grace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Self

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams.kstream.emit_strategy import EmitStrategy, StrategyType
from strom.streams.kstream.internals.cogroup import Aggregator, cogroup_nodes
from strom.streams.kstream.internals.dsl_stores import dsl_store_builder
from strom.streams.kstream.internals.functions import count_aggregator, count_initializer
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.internals.windowed_aggregate import (
    KStreamSessionWindowAggregate,
    KStreamSlidingWindowAggregate,
    KStreamWindowAggregate,
)
from strom.streams.kstream.ktable import KTable
from strom.streams.kstream.options import Materialized, Named, StoreType, named_and_materialized
from strom.streams.kstream.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from strom.streams.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
from strom.streams.state.window import builders

__all__ = [
    "SessionWindowedCogroupedKStream",
    "SessionWindowedKStream",
    "TimeWindowedCogroupedKStream",
    "TimeWindowedKStream",
    "WindowedKTable",
]

AnyWindows = TimeWindows | SlidingWindows | SessionWindows

if TYPE_CHECKING:
    from strom.streams.kstream.cogrouped_kstream import CogroupedKStream
    from strom.streams.kstream.grouped import KGroupedStream


def windowed_by(grouped: KGroupedStream, windows: Any) -> TimeWindowedKStream | SessionWindowedKStream:
    """``KGroupedStream.windowed_by``: time windows (tumbling, hopping, sliding) or session windows."""
    return _by_kind(windows, TimeWindowedKStream, SessionWindowedKStream)(grouped, windows)


def cogrouped_windowed_by(
    cogrouped: CogroupedKStream, windows: Any
) -> TimeWindowedCogroupedKStream | SessionWindowedCogroupedKStream:
    """``CogroupedKStream.windowed_by``."""
    kind = _by_kind(windows, TimeWindowedCogroupedKStream, SessionWindowedCogroupedKStream)
    return kind(cogrouped, windows)


def _by_kind(windows: Any, time_windowed: type, session_windowed: type) -> type:
    if isinstance(windows, TimeWindows | SlidingWindows):
        return time_windowed
    if isinstance(windows, SessionWindows):
        return session_windowed
    raise TopologyError(f"windowed_by needs TimeWindows, SlidingWindows or SessionWindows, got {windows!r}.")


def _retention(materialized: Materialized | None, minimum: int, store_name: str) -> int:
    retention = materialized.retention_ms if materialized is not None else None
    if retention is None:
        return minimum
    if retention < minimum:
        raise TopologyError(
            f"The retention of store {store_name!r} ({retention} ms) must be at least the "
            f"window size plus grace ({minimum} ms); raise Materialized.with_retention."
        )
    return retention


def _apply_options(builder: Any, materialized: Materialized | None, cacheable: bool) -> Any:
    materialized = materialized or Materialized()
    if cacheable and materialized.caching_enabled:
        builder.with_caching_enabled()
    if materialized.logging_enabled:
        builder.with_logging_enabled(materialized.topic_config)
    else:
        builder.with_logging_disabled()
    return builder


class WindowedKTable(KTable):
    """A KTable keyed by ``Windowed`` keys; it remembers its windows (for suppress until they close)."""

    def __init__(self, *args: Any, windows: AnyWindows, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.windows = windows


class _WindowedStream:
    """What the windowed kinds share: ``inputs`` are the grouped streams and their aggregators (one
    for ``windowed_by`` on a grouped stream, several for a cogrouped one)."""

    windows: AnyWindows
    emit = EmitStrategy.on_window_update()

    def __init__(self, grouped: KGroupedStream) -> None:
        self.grouped = grouped

    def _table(
        self,
        prefix: str,
        named: Named | None,
        materialized: Materialized | None,
        inputs: Sequence[tuple[KGroupedStream, Aggregator]],
        make_processor: Callable[[KTableProcessorSupplier, Aggregator], Any],
        store_builder: Callable[[str], Any],
        key_serde: Any,
        value_serde: Any,
    ) -> WindowedKTable:
        builder = self.grouped.builder
        store_name = builder.store_name(materialized, prefix)
        if len(inputs) == 1:
            grouped, aggregator = inputs[0]
            parent = grouped.aggregation_input(store_name)
            name = builder.node_name(named, prefix)
            supplier = KTableProcessorSupplier(lambda s: make_processor(s, aggregator), store_name)
            builder.internal.add_processor(name, supplier, parent)
            updaters, source_topics = [name], grouped.source_topics
        else:
            name, supplier, updaters, source_topics = cogroup_nodes(inputs, store_name, make_processor, named)
        builder.internal.add_state_store(store_builder(store_name), *updaters)
        queryable = store_name if materialized is not None and materialized.store_name else None
        return WindowedKTable(builder, name, supplier, key_serde, value_serde, queryable,
                              source_topics=source_topics, windows=self.windows)

    def _value_serde(self, materialized: Materialized | None, default: Any) -> Any:
        return (materialized.value_serde if materialized else None) or default

    def _key_serde(self, materialized: Materialized | None) -> Any:
        return (materialized.key_serde if materialized else None) or self.grouped.key_serde


class _Emitting:
    """``emit_strategy`` of the windowed streams of one grouped stream (a cogrouped one has none, as
    in Kafka Streams)."""

    windows: AnyWindows
    emit: EmitStrategy

    def emit_strategy(self, strategy: EmitStrategy) -> Self:
        """When results go downstream: ``EmitStrategy.on_window_update()`` (the default) or
        ``EmitStrategy.on_window_close()``, one final result per window or session."""
        if not isinstance(strategy, EmitStrategy):
            raise TopologyError(f"emit_strategy needs an EmitStrategy, got {strategy!r}.")
        self.emit = strategy
        return self


class _TimeWindowed(_WindowedStream):
    """Builds time-windowed aggregations (tumbling, hopping or sliding) into a window store."""

    windows: TimeWindows | SlidingWindows

    def _aggregate(
        self,
        prefix: str,
        initializer: Callable[[], Any],
        inputs: Sequence[tuple[KGroupedStream, Aggregator]],
        named: Named | None,
        materialized: Materialized | None,
        value_serde_default: Any = None,
    ) -> KTable:
        named, materialized = _options(named, materialized, value_serde_default)
        windows = self.windows
        key_serde = self._key_serde(materialized)
        value_serde = self._value_serde(materialized, None)
        emit_on_close = self.emit.type is StrategyType.ON_WINDOW_CLOSE
        if isinstance(windows, SlidingWindows):
            size = windows.time_difference_ms
            processor: Any = partial(KStreamSlidingWindowAggregate, emit_on_close=emit_on_close)
        else:
            size = windows.size_ms
            processor = partial(KStreamWindowAggregate, emit_on_close=emit_on_close)

        def store(store_name: str) -> Any:
            retention = _retention(materialized, windows.retention_ms(), store_name)

            def supplier(store_type: StoreType) -> Any:
                factory = builders.in_memory_timestamped_window_store if store_type is StoreType.IN_MEMORY \
                    else builders.persistent_timestamped_window_store
                return factory(store_name, retention, size)

            store_builder = dsl_store_builder(
                materialized, supplier,
                lambda chosen: builders.window_store_builder(chosen, key_serde, value_serde))
            return _apply_options(store_builder, materialized, cacheable=True)

        return self._table(
            prefix,
            named,
            materialized,
            inputs,
            lambda s, aggregator: processor(windows, s.store_name, initializer, aggregator,
                                            s.send_old_values),
            store,
            TimeWindowedSerde(key_serde, size),
            value_serde,
        )


class TimeWindowedKStream(_Emitting, _TimeWindowed):
    """Aggregations per key and time window: tumbling, hopping or sliding."""

    def __init__(self, grouped: KGroupedStream, windows: TimeWindows | SlidingWindows) -> None:
        super().__init__(grouped)
        self.windows = windows

    def count(self, named: Named | None = None, materialized: Materialized | None = None) -> KTable:
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            count_initializer,
            [(self.grouped, count_aggregator)],
            named,
            materialized,
            Serdes.Long(),
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        named: Named | None = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """``reducer(aggregate, value)``; the first value of a window is its initial aggregate."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            _none,
            [(self.grouped, _reducing(reducer))],
            named,
            materialized,
            self.grouped.value_serde,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        named: Named | None = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` returns the window's new aggregate."""
        return self._aggregate("KSTREAM-AGGREGATE-", initializer, [(self.grouped, aggregator)], named,
                               materialized)


class _SessionWindowed(_WindowedStream):
    """Builds session-windowed aggregations into a session store."""

    windows: SessionWindows

    def _aggregate(
        self,
        prefix: str,
        initializer: Callable[[], Any],
        inputs: Sequence[tuple[KGroupedStream, Aggregator]],
        session_merger: Callable[[Any, Any, Any], Any],
        named: Named | None,
        materialized: Materialized | None,
        value_serde_default: Any = None,
    ) -> KTable:
        named, materialized = _options(named, materialized, value_serde_default)
        windows = self.windows
        key_serde = self._key_serde(materialized)
        value_serde = self._value_serde(materialized, None)

        def store(store_name: str) -> Any:
            retention = _retention(materialized, windows.retention_ms(), store_name)

            def supplier(store_type: StoreType) -> Any:
                factory = builders.in_memory_session_store if store_type is StoreType.IN_MEMORY \
                    else builders.persistent_session_store
                return factory(store_name, retention)

            store_builder = dsl_store_builder(
                materialized, supplier,
                lambda chosen: builders.session_store_builder(chosen, key_serde, value_serde))
            return _apply_options(store_builder, materialized, cacheable=True)

        return self._table(
            prefix,
            named,
            materialized,
            inputs,
            lambda s, aggregator: KStreamSessionWindowAggregate(
                windows, s.store_name, initializer, aggregator, session_merger, s.send_old_values,
                emit_on_close=self.emit.type is StrategyType.ON_WINDOW_CLOSE,
            ),
            store,
            SessionWindowedSerde(key_serde),
            value_serde,
        )


class SessionWindowedKStream(_Emitting, _SessionWindowed):
    """Aggregations per key and session; sessions that a record bridges are merged."""

    def __init__(self, grouped: KGroupedStream, windows: SessionWindows) -> None:
        super().__init__(grouped)
        self.windows = windows

    def count(self, named: Named | None = None, materialized: Materialized | None = None) -> KTable:
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            count_initializer,
            [(self.grouped, count_aggregator)],
            _add,
            named,
            materialized,
            Serdes.Long(),
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        named: Named | None = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        reducing = _reducing(reducer)
        return self._aggregate(
            "KSTREAM-REDUCE-",
            _none,
            [(self.grouped, reducing)],
            lambda key, a, b: reducing(key, b, a),
            named,
            materialized,
            self.grouped.value_serde,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        session_merger: Callable[[Any, Any, Any], Any],
        named: Named | None = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """``session_merger(key, aggregate1, aggregate2)`` combines two sessions that a record joins."""
        return self._aggregate(
            "KSTREAM-AGGREGATE-", initializer, [(self.grouped, aggregator)], session_merger, named,
            materialized
        )


class _CogroupedWindowed(_WindowedStream):
    """The windowed streams of a cogroup: every input's aggregator updates one store."""

    def __init__(self, cogrouped: CogroupedKStream, windows: Any) -> None:
        super().__init__(cogrouped.inputs[0][0])
        self.inputs = list(cogrouped.inputs)
        self.windows = windows


class TimeWindowedCogroupedKStream(_CogroupedWindowed, _TimeWindowed):
    """``cogroup(...).windowed_by(TimeWindows or SlidingWindows)``: each input's aggregator updates
    the windows of one window store."""

    def aggregate(self, initializer: Callable[[], Any], named: Named | None = None,
                  materialized: Materialized | None = None) -> KTable:
        return self._aggregate("COGROUPKSTREAM-AGGREGATE-", initializer, self.inputs, named, materialized)


class SessionWindowedCogroupedKStream(_CogroupedWindowed, _SessionWindowed):
    """``cogroup(...).windowed_by(SessionWindows)``: each input's aggregator updates the sessions of
    one session store; ``session_merger`` combines sessions a record bridges."""

    def aggregate(self, initializer: Callable[[], Any], session_merger: Callable[[Any, Any, Any], Any],
                  named: Named | None = None, materialized: Materialized | None = None) -> KTable:
        return self._aggregate("COGROUPKSTREAM-AGGREGATE-", initializer, self.inputs, session_merger,
                               named, materialized)


def _options(named: Any, materialized: Any,
             value_serde_default: Any) -> tuple[Named | None, Materialized | None]:
    """Kafka's overloads (Named and Materialized in either position); count and reduce give their
    result's value serde unless the Materialized names one."""
    named, materialized = named_and_materialized(named, materialized)
    if value_serde_default is None:
        return named, materialized
    materialized = materialized or Materialized()
    if materialized.value_serde is None:
        materialized = materialized.with_value_serde(value_serde_default)
    return named, materialized


def _reducing(reducer: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    return lambda _key, value, aggregate: value if aggregate is None else reducer(aggregate, value)


def _none() -> None:
    return None



def _add(_key: Any, left: int, right: int) -> int:
    return left + right
