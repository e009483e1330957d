"""Benchmark of strom.tasks: I/O-bound tasks that each wait 10 ms, 3 partitions.

Prints throughput as a fraction of the ideal (partitions x concurrency / latency) and the CPU time this
process spends per task (consumer, dispatch, units, commits; the broker runs in another process).

Every record has its own key, so the hash spreads records over units evenly in the long run. The ideal
assumes every unit always has work; at the end of a finite run that stops holding (units whose hash drew
fewer records run dry first), so the headline figures are measured in the steady state, between the
completion of the first 10% and of 80% of the tasks. ``whole`` is the fraction from the first to the last
completion, tail included.

    .venv/bin/python bench/tasks.py                  # starts an embedded broker
    .venv/bin/python bench/tasks.py --bootstrap-servers host:9092 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import threading
import time
import uuid

from strom.kafka import clients
from strom.tasks import ProcessorsBuilder, SubscriptionBuilder

PARTITIONS = 3
LATENCY_S = 0.010
CASES = {"threads": 10, "asyncio": 100}


STEADY = (0.1, 0.8)


class Meter:
    """Counts completions; notes (wall, CPU) time at the first, the last and the steady-window marks."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self._lock = threading.Lock()
        self.marks = {1, *(int(total * f) for f in STEADY), total}
        self.times: dict[int, tuple[float, float]] = {}
        self.finished = threading.Event()

    def tick(self) -> None:
        with self._lock:
            self.count += 1
            if self.count in self.marks:
                self.times[self.count] = (time.perf_counter(), time.process_time())
                if self.count == self.total:
                    self.finished.set()

    def between(self, start: int, end: int) -> tuple[float, float, int]:
        """Wall seconds, CPU seconds and tasks completed after mark ``start`` up to mark ``end``."""
        (w0, c0), (w1, c1) = self.times[start], self.times[end]
        return w1 - w0, c1 - c0, end - start


def thread_cpu_s(topic: str) -> dict[str, float]:
    """CPU seconds so far of this process's live threads, by role (empty where /proc is missing)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    roles: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        name = names.get(int(tid), "librdkafka")
        role = ("event loop" if name.endswith("-async") else "consume" if name.startswith("subscription-")
                else "units" if name.startswith(topic) else "librdkafka" if name == "librdkafka" else "other")
        with contextlib.suppress(FileNotFoundError), open(f"/proc/self/task/{tid}/schedstat") as f:
            roles[role] = roles.get(role, 0.0) + int(f.read().split()[0]) / 1e9
    return roles


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = clients.producer(bootstrap, **{"linger.ms": 20, "batch.num.messages": 10000})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=b"x" * 64)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)


def run_case(bootstrap: str, mode: str, seconds: float) -> None:
    concurrency = CASES[mode]
    ideal = PARTITIONS * concurrency / LATENCY_S
    total = int(ideal * seconds)
    topic = f"bench-tasks-{mode}-{uuid.uuid4().hex[:6]}"
    clients.create_topics(bootstrap, {topic: PARTITIONS})
    produce(bootstrap, topic, total)
    meter = Meter(total)
    cpu_before = thread_cpu_s(topic)
    if mode == "asyncio":
        async def process(context, task):
            await asyncio.sleep(LATENCY_S)
            meter.tick()
    else:
        def process(context, task):
            time.sleep(LATENCY_S)
            meter.tick()
    subscription = (SubscriptionBuilder.new_builder(f"{topic}-sub")
                    .processors_builder(ProcessorsBuilder.consuming(topic).then_process(process))
                    .properties({"decaton.partition.concurrency": concurrency})
                    .consumer_config({"bootstrap.servers": bootstrap})
                    .build_and_start())
    try:
        if not meter.finished.wait(seconds * 10 + 60):
            print(f"{mode}: only {meter.count}/{total} tasks finished")
            return
        cpu_after = thread_cpu_s(topic)
    finally:
        subscription.close()
    wall, cpu, tasks = meter.between(*(int(total * f) for f in STEADY))
    whole_wall, _, whole_tasks = meter.between(1, total)
    rate = tasks / wall
    print(f"{mode:8s} concurrency={concurrency:<4d} tasks={total:<7d} throughput={rate:8.0f}/s "
          f"ideal={ideal:6.0f}/s fraction={rate / ideal:.2f} cpu/task={cpu / tasks * 1e6:.1f} us "
          f"whole={whole_tasks / whole_wall / ideal:.2f}")
    split = {role: (cpu_after[role] - cpu_before.get(role, 0.0)) / total * 1e6 for role in cpu_after}
    by_cost = sorted(split.items(), key=lambda item: -item[1])
    print("         cpu/task by thread (whole run): "
          + ", ".join(f"{role} {us:.1f} us" for role, us in by_cost if us >= 0.05))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--seconds", type=float, default=5.0, help="ideal duration of each case")
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    args = parser.parse_args()
    cases = list(CASES) if args.case == "all" else [args.case]
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from strom.broker import EmbeddedBroker

            bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap_servers
        for mode in cases:
            run_case(bootstrap, mode, args.seconds)


if __name__ == "__main__":
    main()
