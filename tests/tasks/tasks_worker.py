"""A subscription process for the kill -9 test: appends each processed task to a file, runs until killed
or SIGTERM. Usage: tasks_worker.py BOOTSTRAP TOPIC GROUP OUTFILE"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from strom.tasks import ProcessorsBuilder, SubscriptionBuilder


def main() -> None:
    bootstrap, topic, group, outfile = sys.argv[1:5]
    fd = os.open(outfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def process(context, task: bytes) -> None:
        time.sleep(0.02)
        os.write(fd, task + b"\n")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    subscription = (SubscriptionBuilder.new_builder(group)
                    .processors_builder(ProcessorsBuilder.consuming(topic).then_process(process))
                    .properties({"decaton.partition.concurrency": 8, "decaton.commit.interval.ms": 200})
                    .consumer_config({"bootstrap.servers": bootstrap, "session.timeout.ms": 6000,
                                      "heartbeat.interval.ms": 500})
                    .build_and_start())
    stop.wait()
    subscription.close()


if __name__ == "__main__":
    main()
