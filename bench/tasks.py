"""Benchmark of strom.tasks: I/O-bound tasks that each wait 10 ms, 3 partitions.

Prints throughput as a fraction of the ideal (partitions x concurrency / latency) and the CPU time this
process spends per task (consumer, dispatch, units, commits; the broker runs in another process), split by
thread.

The ideal takes a 10 ms wait to last 10 ms. It lasts longer: the kernel wakes a sleeper late and an event
loop runs a timer only once it is free (uvloop's timers also count whole milliseconds). So the bench also
prints how long the waits inside the processor really took, and the same number of bare coroutines or
threads doing nothing but 10 ms waits, measured just before: the ceiling this machine allows right now.

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

import uvloop

from machine import describe
from strom.kafka import clients
from strom.tasks import ProcessorsBuilder, SubscriptionBuilder

PARTITIONS = 3
LATENCY_S = 0.010
CASES = {"threads": 10, "asyncio": 100}
STEADY = (0.1, 0.8)
BARE_SECONDS = 2.0


class Meter:
    """Counts completions and the time their waits really took; at the first, the last and the steady-window
    marks notes wall and CPU time (and, at the steady marks, CPU time by thread)."""

    def __init__(self, total: int, topic: str) -> None:
        self.total = total
        self.count = 0
        self._topic = topic
        self._lock = threading.Lock()
        self._steady = {int(total * f) for f in STEADY}
        self.marks = {1, *self._steady, total}
        self.times: dict[int, tuple[float, float, float]] = {}
        self.threads: dict[int, dict[str, float]] = {}
        self._waited = 0.0
        self.finished = threading.Event()

    def tick(self, waited_s: float) -> None:
        with self._lock:
            self.count += 1
            self._waited += waited_s
            if self.count in self.marks:
                self.times[self.count] = (time.perf_counter(), time.process_time(), self._waited)
                if self.count in self._steady:
                    self.threads[self.count] = thread_cpu_s(self._topic)
                if self.count == self.total:
                    self.finished.set()

    def between(self, start: int, end: int) -> tuple[float, float, float, int]:
        """Wall, CPU and waited seconds and tasks completed after mark ``start`` up to mark ``end``."""
        (w0, c0, s0), (w1, c1, s1) = self.times[start], self.times[end]
        return w1 - w0, c1 - c0, s1 - s0, end - start

    def thread_split(self, start: int, end: int) -> dict[str, float]:
        """CPU seconds by thread role between two steady marks."""
        before, after = self.threads[start], self.threads[end]
        return {role: cpu - before.get(role, 0.0) for role, cpu in after.items()}


def thread_cpu_s(topic: str) -> dict[str, float]:
    """CPU seconds so far of this process's live threads by role, and their context switches as
    ``"<role> switches"`` (empty where /proc is missing)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    roles: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        name = names.get(int(tid), "librdkafka")
        role = ("event loop" if name.endswith("-async") else "consume" if name.startswith("subscription-")
                else "units" if name.startswith(topic) else "librdkafka" if name == "librdkafka" else "other")
        with contextlib.suppress(FileNotFoundError), open(f"/proc/self/task/{tid}/schedstat") as f:
            roles[role] = roles.get(role, 0.0) + int(f.read().split()[0]) / 1e9
        roles[f"{role} switches"] = roles.get(f"{role} switches", 0.0) + context_switches(int(tid))
    return roles


def context_switches(tid: int) -> int:
    """Voluntary context switches of thread ``tid`` so far: a sleep, or a wait for the GIL or a lock."""
    with contextlib.suppress(FileNotFoundError), open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                return int(line.split()[1])
    return 0


def bare_waits(mode: str, sleepers: int, seconds: float) -> tuple[float, float, float]:
    """Mean duration, CPU seconds and (threads) voluntary context switches of a 10 ms wait when ``sleepers``
    coroutines (on uvloop) or threads do nothing else. Their waits are spread over the 10 ms (waits that
    start together end together and then queue for the GIL: a second context switch per wait)."""
    waits: list[float] = []
    switches: list[int] = []
    cpu_before = time.process_time()
    deadline = time.perf_counter() + seconds

    def sleeper(phase_s: float) -> None:
        time.sleep(phase_s)
        while (start := time.perf_counter()) < deadline:
            time.sleep(LATENCY_S)
            waits.append(time.perf_counter() - start)
        switches.append(context_switches(threading.get_native_id()))

    async def coroutine(phase_s: float) -> None:
        await asyncio.sleep(phase_s)
        while (start := time.perf_counter()) < deadline:
            await asyncio.sleep(LATENCY_S)
            waits.append(time.perf_counter() - start)

    phases = [LATENCY_S * i / sleepers for i in range(sleepers)]

    async def coroutines() -> None:
        await asyncio.gather(*map(coroutine, phases))

    if mode == "asyncio":
        uvloop.run(coroutines())
    else:
        threads = [threading.Thread(target=sleeper, args=(phase,)) for phase in phases]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    count = len(waits)
    return sum(waits) / count, (time.process_time() - cpu_before) / count, sum(switches) / count


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
    bare_wait, bare_cpu, bare_switches = bare_waits(mode, PARTITIONS * concurrency, BARE_SECONDS)
    meter = Meter(total, topic)
    if mode == "asyncio":
        async def process(context, task):
            start = time.perf_counter()
            await asyncio.sleep(LATENCY_S)
            meter.tick(time.perf_counter() - start)
    else:
        def process(context, task):
            start = time.perf_counter()
            time.sleep(LATENCY_S)
            meter.tick(time.perf_counter() - start)
    subscription = (SubscriptionBuilder.new_builder(f"{topic}-sub")
                    .processors_builder(ProcessorsBuilder.consuming(topic).then_process(process))
                    .properties({"decaton.partition.concurrency": concurrency})
                    .consumer_config({"bootstrap.servers": bootstrap})
                    .build_and_start())
    try:
        if not meter.finished.wait(seconds * 10 + 60):
            print(f"{mode}: only {meter.count}/{total} tasks finished")
            return
    finally:
        subscription.close()
    steady = [int(total * f) for f in STEADY]
    wall, cpu, waited, tasks = meter.between(*steady)
    whole_wall, _, _, whole_tasks = meter.between(1, total)
    rate = tasks / wall
    print(f"{mode:8s} concurrency={concurrency:<4d} tasks={total:<7d} throughput={rate:8.0f}/s "
          f"ideal={ideal:6.0f}/s fraction={rate / ideal:.2f} cpu/task={cpu / tasks * 1e6:.1f} us "
          f"whole={whole_tasks / whole_wall / ideal:.2f}")
    bare_switching = f", {bare_switches:.2f} context switches" if mode == "threads" else ""
    print(f"         10 ms waits took {waited / tasks * 1e3:.2f} ms; bare {mode} here: "
          f"{bare_wait * 1e3:.2f} ms (ceiling fraction {LATENCY_S / bare_wait:.2f}), "
          f"{bare_cpu * 1e6:.1f} us CPU{bare_switching} per wait")
    split = meter.thread_split(*steady)
    by_cost = sorted(((role, cpu) for role, cpu in split.items() if not role.endswith(" switches")),
                     key=lambda item: -item[1])
    print("         cpu/task by thread: " + ", ".join(
        f"{role} {cpu / tasks * 1e6:.1f} us ({split[f'{role} switches'] / tasks:.2f} context switches)"
        for role, cpu in by_cost if cpu / tasks >= 5e-8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--seconds", type=float, default=5.0, help="ideal duration of each case")
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    args = parser.parse_args()
    cases = list(CASES) if args.case == "all" else [args.case]
    print(describe())
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from strom.broker import EmbeddedBroker

            bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap_servers
        for mode in cases:
            run_case(bootstrap, mode, args.seconds)


if __name__ == "__main__":
    main()
