"""Start-up, phase by phase: from a new process to the first record processed (issue 29).

    python bench/startup.py [--mode cold,demo,restart,warm] [--records 1000] [--partitions 4]
                            [--repeat 1] [--before SRC_DIR]

``--before DIR`` runs every mode also with strom's sources from DIR (e.g. ``git archive REV src | tar
-x -C /tmp/before``: DIR/src put first on PYTHONPATH, which Spark's Python workers inherit), the two
interleaved in one run: before/after figures taken under the same load.

The workload is bench/pipeline.py's count-by-key (JSON records, exactly_once_v2,
commit.interval.ms=100, 4 partitions, local[2]) on an embedded broker; the input is there before the
application starts (warm) or is produced as soon as the broker listens (cold).

  warm  A new Python process (``--child``): imports, an embedded broker, ``strom.spark.session()``, then
        two applications one after the other on that session. The first ``SparkStreams.start()`` pays
        for the first Spark job and the Python worker daemon and workers; the second is the warm case
        (target: ``start()`` to the first record processed <= 1.0 s).
  cold  ``strom run app.py`` as a new process without bootstrap servers (it starts its embedded broker):
        from the process's start to the first output record read (read_committed) by this bench
        (target <= 8 s).
  demo  ``strom demo`` (its defaults) as a new process: its whole run, start to exit (target <= 15 s).
  restart  ``strom run app.py --bootstrap-servers`` on an embedded broker the bench starts: the driver
        is killed (SIGKILL of its process group: the driver, its JVM and Python workers) as soon as its
        first output record is read, a second batch of input is written while it is down, and ``strom
        run`` is started again with the same application.id and state.dir: from the new process's
        start to its first output record (target <= 10 s). The bench then checks that the counts are
        exact (every key counted once per input record: exactly_once_v2 across the kill).

The summary's last line is ``startup: cold X s, demo Y s, restart Z s`` (medians; with ``--before``,
the line before it gives the earlier sources' figures).

Each phase is a mark the runtime logs at DEBUG on logger ``strom.startup`` (``strom.spark.startup``):
in the driver, and in the Python workers through ``STROM_WORKER_LOG_LEVEL=DEBUG``. Each line has the
wall-clock time, so the bench orders the marks of every process; the first record processed is marked
by the application's JSON parse (in the Python worker), the first output record by this bench's consumer.
Figures are seconds since the process started (``at``) and since the previous mark (``step``); ``cpu``
is the CPU seconds of the whole process tree (driver, JVM, Python workers), from its start to its end.
The host is shared: the first line gives the load average, and CPU seconds vary less than wall time.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from machine import describe

MARK = re.compile(r"phase (\S+) at ([\d.]+) pid (\d+) ?(.*)$")
COMMIT_INTERVAL_MS = "100"
WORKER_LOG_LEVEL = {"STROM_WORKER_LOG_LEVEL": "DEBUG"}

LABELS = {
    "imports": "Python imports (strom, pyspark)",
    "jvm-launched": "Spark's JVM launched (as the command began)",
    "jvm-gateway": "the JVM's gateway listening",
    "jvm-warmed": "Spark SQL's static work warmed (beside the SparkContext's creation)",
    "application-loaded": "strom CLI + app.py imported and built",
    "broker": "embedded broker up (bench, not strom's start-up)",
    "spark-session": "Spark session: JVM started, SparkContext up",
    "spark-registered": "log level set, strom data source registered",
    "start": "SparkStreams.start() called",
    "planned": "planned (admin metadata), tasks built on the driver",
    "internal-topics": "internal topics created",
    "daemon-imported": "early Python worker daemon: modules imported, waiting",
    "job-submitted": "batch job submitted (threads' Spark job)",
    "daemon-taken": "early daemon taken over by the one Spark started",
    "started": "start() returned",
    "thread-started": "stream thread running in a Python worker",
    "assigned": "hello answered: tasks assigned",
    "task-open": "task open: producer, init_transactions, offsets, restore",
    "tasks-open": "all of the thread's tasks open",
    "consumer": "thread's consumer created and assigned",
    "first-poll": "first records polled",
    "first-record": "FIRST RECORD PROCESSED (JSON parse in the worker)",
    "first-output": "FIRST OUTPUT RECORD read by the bench (committed)",
}


@dataclass(order=True)
class Mark:
    at: float
    phase: str = field(compare=False)
    pid: int = field(compare=False)
    detail: str = field(compare=False, default="")


def parse_marks(lines: list[str]) -> list[Mark]:
    marks = []
    for line in lines:
        found = MARK.search(line)
        if found:
            phase, at, pid, detail = found.groups()
            marks.append(Mark(float(at), phase, int(pid), detail.strip()))
    return sorted(marks)


def print_timeline(title: str, origin: float, marks: list[Mark]) -> None:
    print(f"\n{title}")
    print(f"  {'at s':>7} {'step s':>7}  phase")
    previous = origin
    for mark in marks:
        label = LABELS.get(mark.phase, mark.phase)
        detail = f"  [{mark.detail}]" if mark.detail and mark.phase not in ("start", "started") else ""
        print(f"  {mark.at - origin:7.2f} {mark.at - previous:7.2f}  {label}{detail}")
        previous = mark.at


# --- the workload (also imported by the cold run's app.py) ---------------------------------------

APP_TEMPLATE = '''"""bench/startup.py's application for ``strom run``: count-by-key of JSON records."""
import json
import logging
import os
import resource
import time

from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder


{parse_json}

def build():
    marks = logging.getLogger("strom.startup")
    marks.setLevel(logging.DEBUG)
    marks.debug("phase application-loaded at %.3f pid %d", time.time(), os.getpid())
    builder = StreamsBuilder()
    (builder.stream({source!r}, Consumed.with_(Serdes.String(), Serdes.String()))
        .map_values(ParseJson({mark!r}))
        .group_by_key()
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to({sink!r}, Produced.with_(Serdes.String(), Serdes.Long())))
    return builder.build(), {{
        "application.id": {app_id!r}, "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": {commit!r}, "state.dir": {state_dir!r}}}
'''


class ParseJson:
    """The per-record work (json.loads); the first record it sees in any process writes the time."""

    def __init__(self, mark: str) -> None:
        self.mark, self.marked = mark, False

    def __call__(self, value: str) -> object:
        if not self.marked:
            self.marked = True
            try:
                descriptor = os.open(self.mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                with os.fdopen(descriptor, "w") as file:
                    file.write(repr(time.time()))
        return json.loads(value)


def record(i: int, keys: int = 100) -> tuple[bytes, bytes]:
    return f"key-{i % keys}".encode(), json.dumps({"key": f"key-{i % keys}", "seq": i}).encode()


def produce(bootstrap: str, topic: str, count: int) -> None:
    produce_range(bootstrap, topic, 0, count)


def produce_range(bootstrap: str, topic: str, start: int, end: int) -> None:
    from strom.kafka import clients
    from strom.kafka.clients import JAVA_PARTITIONER

    producer = clients.producer(bootstrap, **JAVA_PARTITIONER)
    for i in range(start, end):
        key, value = record(i)
        clients.produce(producer, topic, value, key)
    assert producer.flush(60) == 0, "the input was not all written in 60 s"


def wait_for_file(path: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = Path(path).read_text()
            if text:
                return float(text)
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise TimeoutError(f"no record processed in {timeout:.0f} s ({path})")


# --- warm: SparkStreams.start() on a session, twice, in a new process -----------------------------

def python_workers() -> int:
    """Spark Python workers alive (processes forked by strom's worker daemon), on Linux."""
    parents: dict[int, int] = {}
    daemons = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if b"strom.spark.runtime.daemon" in command:
            daemons.add(int(entry.name))
    return sum(1 for pid in daemons if parents.get(pid) in daemons)


def child(args: argparse.Namespace) -> None:
    """The warm run's process: its marks go to stderr, its first-record times to stdout."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("strom.startup").setLevel(logging.DEBUG)
    from strom.broker import EmbeddedBroker
    from strom.kafka import clients
    from strom.spark.runtime import SparkStreams
    from strom.spark.startup import mark
    from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder
    mark("imports")
    workdir = tempfile.mkdtemp(prefix="strom-bench-startup-")
    with EmbeddedBroker() as broker:
        mark("broker")
        import strom.spark

        spark = strom.spark.session(app_name="strom-bench-startup", master="local[2]")
        for name in ("first-app", "warm-app"):
            suffix = uuid.uuid4().hex[:8]
            source, sink = f"startup-in-{suffix}", f"startup-out-{suffix}"
            clients.create_topics(broker.bootstrap_servers, {source: args.partitions, sink: args.partitions})
            produce(broker.bootstrap_servers, source, args.records)
            builder = StreamsBuilder()
            (builder.stream(source, Consumed.with_(Serdes.String(), Serdes.String()))
                .map_values(ParseJson(f"{workdir}/{name}.first"))
                .group_by_key()
                .count(materialized=Materialized.as_("counts"))
                .to_stream()
                .to(sink, Produced.with_(Serdes.String(), Serdes.Long())))
            app = SparkStreams(builder.build(), {
                "application.id": f"startup-{name}-{suffix}", "bootstrap.servers": broker.bootstrap_servers,
                "processing.guarantee": "exactly_once_v2", "commit.interval.ms": COMMIT_INTERVAL_MS,
                "state.dir": workdir}, spark)
            started = time.time()
            app.start()
            first = wait_for_file(f"{workdir}/{name}.first", 120)
            print(json.dumps({"app": name, "start": started, "first_record": first}), flush=True)
            if not app.wait_until_caught_up(120):
                raise RuntimeError(f"{name} did not catch up in 120 s")
            app.stop()
            print(json.dumps({"app": name, "workers_after_stop": python_workers()}), flush=True)
        spark.stop()


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def environment(src: str | None) -> dict[str, str]:
    env = {**os.environ, **WORKER_LOG_LEVEL}
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (f"{src}/src", env.get("PYTHONPATH")) if p)
    return env


def run_warm(args: argparse.Namespace, src: str | None) -> dict[str, float]:
    env = environment(src)
    cpu = children_cpu_s()
    spawned = time.time()
    done = subprocess.run([sys.executable, __file__, "--child", "--records", str(args.records),
                           "--partitions", str(args.partitions)],
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise RuntimeError(f"the warm run's process failed ({done.returncode})")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    apps = [line for line in lines if "start" in line]
    for line in lines:
        if "workers_after_stop" in line:
            print(f"  note: {line['workers_after_stop']} Python workers alive after {line['app']} stopped")
    marks = parse_marks(done.stderr.splitlines())
    for line in done.stderr.splitlines():
        if "cancelling" in line:  # its Python workers are killed: the next application starts new ones
            print(f"  note: {line.strip()}")
    figures: dict[str, float] = {}
    session = [m for m in marks if m.at < apps[0]["start"]]
    print_timeline("warm run, process and session (seconds since the process was spawned):", spawned, session)
    for number, app in enumerate(apps):
        end = apps[number + 1]["start"] if number + 1 < len(apps) else float("inf")
        own = [m for m in marks if app["start"] <= m.at < end and m.at <= app["first_record"]]
        own.append(Mark(app["first_record"], "first-record", 0))
        print_timeline(f"{app['app']}: SparkStreams.start() to the first record (seconds since start()):",
                       app["start"], own)
        figures[app["app"]] = app["first_record"] - app["start"]
    figures["process-to-warm-session"] = apps[0]["start"] - spawned
    figures["warm-process-cpu"] = children_cpu_s() - cpu
    return figures


# --- cold and restart: strom run app.py ----------------------------------------------------------

STROM = [sys.executable, "-c", "from strom.cli.main import main; main()"]


class StromRun:
    """``strom run app.py`` as a new process (its own process group), its stderr collected."""

    def __init__(self, app: Path, env: dict[str, str], *options: str) -> None:
        self.lines: list[str] = []
        self.broker_seen = threading.Event()
        self.bootstrap: list[str] = []
        self.spawned = time.time()
        self.process = subprocess.Popen([*STROM, "run", str(app), "--master", "local[2]", *options], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        cwd=app.parent, start_new_session=True)
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            found = re.search(r"embedded broker at (\S+) ", line)
            if found and not self.broker_seen.is_set():
                self.bootstrap.append(found.group(1))
                self.broker_seen.set()

    def tail(self) -> str:
        return "".join(self.lines[-40:])

    def check_running(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError("strom run ended:\n" + self.tail())

    def stop(self) -> None:
        """SIGTERM, as a user's Ctrl-C or a supervisor's stop."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.kill()
        self.reader.join(5)

    def kill(self) -> None:
        """A driver's crash: SIGKILL to its whole process group (driver, JVM, Python workers)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.reader.join(5)


def write_app(workdir: str, source: str, sink: str, app_id: str, mark: str) -> Path:
    app = Path(workdir) / "app.py"
    app.write_text(APP_TEMPLATE.format(
        parse_json=inspect.getsource(ParseJson), source=source, sink=sink, mark=mark,
        state_dir=workdir, app_id=app_id, commit=COMMIT_INTERVAL_MS))
    return app


def first_output(bootstrap: str, sink: str, run: StromRun,
                 start_offsets: dict[int, int] | None = None) -> float:
    """When this bench reads the first output record (read_committed), from ``start_offsets`` or the
    beginning."""
    from confluent_kafka import TopicPartition

    from strom.kafka import clients

    consumer = clients.consumer(bootstrap, group_id=f"startup-reader-{uuid.uuid4().hex[:8]}", **{
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False})
    if start_offsets is None:
        consumer.subscribe([sink])
    else:
        consumer.assign([TopicPartition(sink, p, offset) for p, offset in start_offsets.items()])
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            run.check_running()
            message = consumer.poll(0.05)
            if message is not None and message.error() is None:
                return time.time()
        raise RuntimeError("no output record in 600 s:\n" + run.tail())
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    from strom.kafka import clients

    consumer = clients.consumer(bootstrap, group_id=f"startup-ends-{uuid.uuid4().hex[:8]}")
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def final_counts(bootstrap: str, sink: str, expected: dict[str, int], run: StromRun,
                 timeout_s: float = 300) -> dict[str, int]:
    """The last count of every key (read_committed), once every key reached its expected count or
    ``timeout_s`` passed; a count above the expected one is a record counted twice."""
    from strom.kafka import clients

    consumer = clients.consumer(bootstrap, group_id=f"startup-check-{uuid.uuid4().hex[:8]}", **{
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([sink])
    counts: dict[str, int] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while counts != expected and time.monotonic() < deadline:
            run.check_running()
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                counts[message.key().decode()] = int.from_bytes(message.value(), "big", signed=True)
        return counts
    finally:
        consumer.close()


def timeline(run: StromRun, first_record: float, first_out: float, *extra: Mark) -> list[Mark]:
    marks = [m for m in parse_marks(run.lines) if m.at <= first_record]
    return sorted([*marks, *extra, Mark(first_record, "first-record", 0), Mark(first_out, "first-output", 0)])


def run_cold(args: argparse.Namespace, src: str | None) -> dict[str, float]:
    from strom.kafka import clients

    workdir = tempfile.mkdtemp(prefix="strom-bench-startup-cold-")
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"startup-in-{suffix}", f"startup-out-{suffix}"
    app = write_app(workdir, source, sink, f"startup-cold-{suffix}", f"{workdir}/first")
    cpu = children_cpu_s()
    run = StromRun(app, environment(src))
    try:
        if not run.broker_seen.wait(120):
            raise RuntimeError("strom run printed no embedded broker in 120 s:\n" + run.tail())
        broker_at = time.time()
        clients.create_topics(run.bootstrap[0], {sink: args.partitions})
        produce(run.bootstrap[0], source, args.records)
        output_at = first_output(run.bootstrap[0], sink, run)
    finally:
        run.stop()
    first_record = wait_for_file(f"{workdir}/first", 1)
    broker = Mark(broker_at, "broker", run.process.pid, "seen by the bench; input produced from here")
    print_timeline("cold: strom run app.py, embedded broker (seconds since the process was spawned):",
                   run.spawned, timeline(run, first_record, output_at, broker))
    return {"cold-first-record": first_record - run.spawned, "cold-first-output": output_at - run.spawned,
            "cold-process-cpu": children_cpu_s() - cpu}


def run_restart(args: argparse.Namespace, src: str | None) -> dict[str, float]:
    """A driver killed while it processes, then ``strom run`` again: time to processing again."""
    from strom.broker import EmbeddedBroker
    from strom.kafka import clients

    workdir = tempfile.mkdtemp(prefix="strom-bench-startup-restart-")
    suffix = uuid.uuid4().hex[:8]
    source, sink, app_id = f"startup-in-{suffix}", f"startup-out-{suffix}", f"startup-restart-{suffix}"
    env = environment(src)
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        clients.create_topics(bootstrap, {source: args.partitions, sink: args.partitions})
        produce(bootstrap, source, args.records)
        app = write_app(workdir, source, sink, app_id, f"{workdir}/first-1")
        first = StromRun(app, env, "--bootstrap-servers", bootstrap)
        try:
            first_output(bootstrap, sink, first)
        finally:
            first.kill()
        produce_range(bootstrap, source, args.records, 2 * args.records)  # piling up while it is down
        ends = end_offsets(bootstrap, sink, args.partitions)
        app = write_app(workdir, source, sink, app_id, f"{workdir}/first-2")
        cpu = children_cpu_s()
        second = StromRun(app, env, "--bootstrap-servers", bootstrap)
        try:
            output_at = first_output(bootstrap, sink, second, ends)
            expected = Counter(record(i)[0].decode() for i in range(2 * args.records))
            counts = final_counts(bootstrap, sink, dict(expected), second)
        finally:
            second.stop()
    first_record = wait_for_file(f"{workdir}/first-2", 1)
    print_timeline("restart: strom run again after a SIGKILL, same application.id and state.dir "
                   "(seconds since the new process was spawned):",
                   second.spawned, timeline(second, first_record, output_at))
    wrong = {key: (n, counts.get(key)) for key, n in expected.items() if counts.get(key) != n}
    print(f"  exactly_once_v2 across the kill: {'exact' if not wrong else f'NOT EXACT {wrong}'}")
    if wrong:
        raise RuntimeError(f"counts after the restart are not exact (expected, read): {wrong}")
    return {"restart-first-output": output_at - second.spawned, "restart-first-record":
            first_record - second.spawned, "restart-process-cpu": children_cpu_s() - cpu}


# --- demo: strom demo, start to exit ---------------------------------------------------------------

def run_demo(args: argparse.Namespace, src: str | None) -> dict[str, float]:
    cpu = children_cpu_s()
    started = time.time()
    done = subprocess.run([*STROM, "demo"], env=environment(src), capture_output=True, text=True,
                          timeout=600, cwd=tempfile.mkdtemp(prefix="strom-bench-startup-demo-"))
    took = time.time() - started
    if done.returncode != 0:
        raise RuntimeError(f"strom demo failed ({done.returncode}):\n"
                           f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    output = done.stdout + done.stderr
    spark = re.search(r"start-up: Spark session[^│]*│\s*([\d.]+) s", output)
    rate = re.search(r"steady rate[^│]*│\s*([\d,]+ records/s)", output)
    print(f"\ndemo: strom demo, start to exit {took:.2f} s"
          + (f" (its Spark session {spark.group(1)} s" if spark else " (")
          + (f", its steady rate {rate.group(1)})" if rate else ")"))
    return {"demo-whole-run": took, "demo-process-cpu": children_cpu_s() - cpu}


def wait_for_archive_writers(timeout_s: float = 600) -> None:
    """A first local start without a class-data-sharing archive has its JVM write one as it exits
    (strom.spark.class_archive): seconds of CPU after strom ended, kept out of the next run."""
    from strom.spark.class_archive import cache_directory

    option = f"-XX:ArchiveClassesAtExit={cache_directory()}".encode()
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        writing = False
        for entry in Path("/proc").iterdir():
            try:
                writing = writing or option in (entry / "cmdline").read_bytes()
            except OSError:
                continue
        if not writing:
            break
        time.sleep(0.5)
    if time.monotonic() - started > 1:
        print(f"  (waited {time.monotonic() - started:.1f} s for a JVM writing its class-data-sharing "
              "archive)")


MODES = {"warm": run_warm, "cold": run_cold, "demo": run_demo, "restart": run_restart}
HEADLINE = {"cold": "cold-first-output", "demo": "demo-whole-run", "restart": "restart-first-output"}
TARGETS = {"warm-app": 1.0, "cold-first-output": 8.0, "demo-whole-run": 15.0, "restart-first-output": 10.0}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="cold,demo,restart",
                        help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--records", type=int, default=1000, help="input records")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode; the summary gives medians")
    parser.add_argument("--before", metavar="SRC_DIR", help="also run strom's sources from SRC_DIR/src")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.child:
        child(args)
        return 0
    print(describe(), flush=True)
    versions = {"before": args.before, "after": None} if args.before else {"this": None}
    runs: dict[tuple[str, str], list[float]] = {}
    loads: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for mode in args.mode.split(","):
            for version, src in versions.items():
                load = os.getloadavg()[0]
                print(f"\n===== {mode}, {version} ({src or 'this checkout'}), load average {load:.2f}",
                      flush=True)
                for name, value in MODES[mode](args, src).items():
                    runs.setdefault((name, version), []).append(value)
                    loads.setdefault((name, version), []).append(load)
                wait_for_archive_writers()
    print(f"\nsummary ({args.repeat} run(s) each, median; load average now {os.getloadavg()[0]:.2f}):")
    for (name, version), values in runs.items():
        target = f"  (target <= {TARGETS[name]:.1f} s)" if name in TARGETS else ""
        pairs = zip(values, loads[(name, version)], strict=True)
        each = ", ".join(f"{v:.2f} (load {load:.1f})" for v, load in pairs)
        print(f"  {name:26} {version:6} {statistics.median(values):6.2f} s  runs {each}{target}")
    for version in versions:
        figures = ", ".join(f"{mode} {statistics.median(runs[(name, version)]):.1f} s"
                            if (name, version) in runs else f"{mode} -" for mode, name in HEADLINE.items())
        print(f"startup{'' if version == list(versions)[-1] else f' ({version})'}: {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
