"""The word count with a store of every kind, and a driver that answers the Python query API on request:
what ``test_queries_on_cluster.py`` submits to its cluster.

``python cluster_queries.py`` takes wordcount.py's arguments. The lines are a versioned table (``lines``)
whose records go on to the word count (``counts``, key-value), which also counts per 10 s window
(``windowed``) and per session (``sessions``). While it waits for INPUT_DONE, a file ``INPUT_DONE.ask``
makes the driver ask every query type of ``SparkStreams`` (IQv2, the key metadata, the IQv1 views) and
pickle what came back into ``INPUT_DONE.answers``, for the test to check against the
TopologyTestDriver's stores.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from strom.errors import InvalidStateStoreError
from strom.streams import (
    Consumed,
    Grouped,
    KeyQuery,
    Materialized,
    MultiVersionedKeyQuery,
    PositionBound,
    Produced,
    QueryableStoreTypes,
    RangeQuery,
    Repartitioned,
    SessionWindows,
    StateQueryRequest,
    StoreQueryParameters,
    Stores,
    StreamsBuilder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    TimeWindows,
    Topology,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)

if __package__:  # imported by the test
    from .wordcount import L, S, main
else:  # run by spark-submit, with this directory on PYTHONPATH
    from wordcount import L, S, main

KEEP = timedelta(days=1)
"""Grace and history retention: the input's timestamps span minutes, every window and version stays."""
FOREVER = 2**62
RETRIABLE = {"NOT_PRESENT", "NOT_ACTIVE", "NOT_UP_TO_BOUND"}


def queried(lines: str, counts: str) -> Topology:
    builder = StreamsBuilder()
    words = (builder.table(lines, Consumed.with_(S, S),
                           Materialized.as_(Stores.persistent_versioned_key_value_store("lines", KEEP)))
             .to_stream()
             .flat_map_values(str.split)
             .select_key(lambda key, word: word)
             .repartition(Repartitioned.with_(S, S).with_name("words"))  # one topic for the three stores
             .group_by_key(Grouped.with_(S, S)))
    words.count(materialized=Materialized.as_("counts")).to_stream().to(counts, Produced.with_(S, L))
    words.windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), KEEP)).count(
        materialized=Materialized.as_("windowed"))
    words.windowed_by(SessionWindows.of_inactivity_gap_and_grace(timedelta(seconds=5), KEEP)).count(
        materialized=Materialized.as_("sessions"))
    return builder.build()


def answers(app: Any) -> dict[str, Any]:
    """Each query's answer by name: IQv2 results as {partition: result} (a failure as its reason's
    name), the metadata, and the IQv1 views' reads."""
    def ask(store: str, query: Any, partitions: list[int] | None = None, bound: Any = None) -> Any:
        request = StateQueryRequest.in_store(store).with_query(query).require_active()
        if partitions is not None:
            request = request.with_partitions(partitions)
        if bound is not None:
            request = request.with_position_bound(bound)
        return app.query(request)

    def results(store: str, query: Any, **options: Any) -> dict[int, Any]:
        return {p: r.result if r.is_success() else r.failure_reason.name
                for p, r in ask(store, query, **options).partition_results.items()}

    position = ask("counts", RangeQuery.with_no_bounds()).get_position()
    found: dict[str, Any] = {
        "key w3": results("counts", KeyQuery.with_key("w3")),
        "key nope": results("counts", KeyQuery.with_key("nope")),
        "stamped w3": results("counts", TimestampedKeyQuery.with_key("w3")),
        "all": results("counts", RangeQuery.with_no_bounds()),
        "range w1..w13": results("counts", RangeQuery.with_range("w1", "w13")),
        "from w2": results("counts", RangeQuery.with_lower_bound("w2")),
        "to w2": results("counts", RangeQuery.with_upper_bound("w2")),
        "descending": results("counts", RangeQuery.with_no_bounds().with_descending_keys()),
        "stamped all": results("counts", TimestampedRangeQuery.with_no_bounds()),
        "partition 0": results("counts", RangeQuery.with_no_bounds(), partitions=[0]),
        "bounded w3": results("counts", KeyQuery.with_key("w3"), bound=PositionBound.at(position)),
        "window w3": results("windowed", WindowKeyQuery.with_key_and_window_start_range("w3", 0, FOREVER)),
        "windows": results("windowed", WindowRangeQuery.with_window_start_range(0, FOREVER)),
        "sessions w3": results("sessions", WindowRangeQuery.with_key("w3")),
        "version k7": results("lines", VersionedKeyQuery.with_key("k7")),
        "versions k7": results("lines", MultiVersionedKeyQuery.with_key("k7")),
        "position topics": sorted(position.topics),
    }
    found["version k7 before"] = {p: results("lines", VersionedKeyQuery.with_key("k7").as_of(r.timestamp - 1))
                                  for p, r in found["version k7"].items() if r is not None}
    found["key metadata"] = {word: (m.partition, m.active_host.port, sorted(h.port for h in m.standby_hosts))
                             for word in [f"w{n}" for n in range(30)]
                             for m in [app.query_metadata_for_key("counts", word)]}
    found["store metadata"] = sorted(
        (m.host_info.port, sorted(m.active_partitions), sorted(m.standby_partitions))
        for m in app.streams_metadata_for_store("counts"))

    def view(store: str, kind: Any) -> Any:
        return app.store(StoreQueryParameters.from_name(store, kind))

    counts = view("counts", QueryableStoreTypes.key_value_store())
    windows = view("windowed", QueryableStoreTypes.window_store())
    sessions = view("sessions", QueryableStoreTypes.session_store())
    found["view"] = {
        "get w3": counts.get("w3"), "all": sorted(counts.all()), "range": sorted(counts.range("w1", "w13")),
        "prefix w1": list(counts.prefix_scan("w1", S.serializer())),
        "entries": counts.approximate_num_entries(),
        "stamped w3": view("counts", QueryableStoreTypes.timestamped_key_value_store()).get("w3"),
        "window fetch w3": list(windows.fetch_range("w3", 0, FOREVER)),
        "sessions w3": list(sessions.fetch("w3")),
        "version k7": view("lines", QueryableStoreTypes.versioned_key_value_store()).get("k7"),
    }
    return found


def _retriable(found: dict[str, Any]) -> bool:
    return any(r in RETRIABLE for answer in found.values() if isinstance(answer, dict)
               for r in answer.values() if isinstance(r, str))


def _answer_when_asked(input_done: str) -> Any:
    """Answers once asked; asks again (up to 30 s) while a partition cannot answer now (a task moving
    between batches), so the answers the test checks are every partition's."""
    asked, answered = Path(f"{input_done}.ask"), Path(f"{input_done}.answers")

    def waiting(app: Any) -> None:
        if asked.exists() and not answered.exists():
            deadline = time.monotonic() + 30
            while True:
                try:
                    found = answers(app)
                    if not _retriable(found) or time.monotonic() > deadline:
                        break
                except InvalidStateStoreError:  # a view's read some partition could not answer
                    if time.monotonic() > deadline:
                        raise
                time.sleep(1.0)
            part = answered.with_suffix(".part")
            part.write_bytes(pickle.dumps(found))
            os.replace(part, answered)
    return waiting


if __name__ == "__main__":
    main(*sys.argv[1:9], build=queried, waiting=_answer_when_asked(sys.argv[7]))
