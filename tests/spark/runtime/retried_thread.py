"""An application whose stream thread's Python worker dies once mid-transaction, run in a process of its own
on ``local[2,2]`` (local Spark retries a failed task only when its master says so; the tests' shared session
is ``local[2]``). Used by test_thread_transactions.py.

    python retried_thread.py BOOTSTRAP SOURCE SINK STATE_DIR CRASHED

Counts SOURCE per key into SINK under exactly_once_v2 in real-time mode, one stream thread, no record cache
(each count is sent as it is counted). The first time it meets the value ``crash`` (no file CRASHED yet) it
waits a second, so the counts sent before it in the open transaction reach the broker, and ends its Python
worker with ``os._exit``: outside strom's handlers, so Spark fails the task and retries it. Stops once the
application committed every record of SOURCE (all written before it starts); exits 1 after 4 minutes.
"""

from __future__ import annotations

import os
import sys
import time

from strom.streams import Topology


def topology(source: str, sink: str, crashed: str) -> Topology:
    from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder

    def crash_once(key, value):
        if value == "crash" and not os.path.exists(crashed):
            open(crashed, "w").close()
            time.sleep(1)  # the counts sent so far in this transaction reach the broker
            os._exit(17)
        return value

    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(Serdes.String(), Serdes.String())).map_values(crash_once)
        .group_by_key().count(materialized=Materialized.as_("counts")).to_stream()
        .to(sink, Produced.with_(Serdes.String(), Serdes.Long())))
    return builder.build()


def main(bootstrap: str, source: str, sink: str, state_dir: str, crashed: str) -> int:
    import strom.spark
    from strom.spark.runtime import SparkStreams

    spark = strom.spark.session(app_name="strom-retried-thread", master="local[2,2]", log_level="ERROR")
    app = SparkStreams(topology(source, sink, crashed), {
        "application.id": f"retried-{source}", "bootstrap.servers": bootstrap,
        "processing.guarantee": "exactly_once_v2", "state.dir": state_dir, "execution.mode": "realtime",
        "commit.interval.ms": 200, "num.stream.threads": 1, "statestore.cache.max.bytes": 0}, spark)
    app.start()
    try:
        caught_up = app.wait_until_caught_up(240)  # every record is in SOURCE before the start
    finally:
        app.stop()
        spark.stop()
    return 0 if caught_up else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
