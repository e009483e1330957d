"""A strom.tasks subscription on a host of its own for the scenario-7 tests: ``python tasks_processor.py
BOOTSTRAP TOPIC GROUP OUTFILE``. Each processed task appends ``<key> <value>`` to OUTFILE (one write
each, O_APPEND); runs until SIGTERM, then closes the subscription (drain, commit)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from strom.tasks import ProcessorsBuilder, SubscriptionBuilder

SESSION_TIMEOUT_MS = 10_000
"""Shorter than librdkafka's 45 s so that a cut-off member's partitions move within the scenario."""


def main(bootstrap: str, topic: str, group: str, outfile: str) -> None:
    fd = os.open(outfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def process(context, task: bytes) -> None:
        time.sleep(0.002)  # a little I/O
        os.write(fd, context.key() + b" " + task + b"\n")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    subscription = (SubscriptionBuilder.new_builder(group)
                    .processors_builder(ProcessorsBuilder.consuming(topic).then_process(process))
                    .properties({"decaton.partition.concurrency": 4})
                    .consumer_config({"bootstrap.servers": bootstrap,
                                      "session.timeout.ms": SESSION_TIMEOUT_MS})
                    .build_and_start())
    stop.wait()
    subscription.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
