"""`strom run` as a user runs it: a subprocess on local Spark with its own embedded broker, status
lines, SIGTERM stopping cleanly, a failure exiting non-zero (--until-caught-up against the shared broker
and a spark:// master: test_spark_submit.py)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from strom.kafka import clients
from support.processes import STROM, free_port
from support.word_count_app import APP, app_env, read_counts

LINES = ["a b c", "b c", "c", "a a"]
EXPECTED = Counter(" ".join(LINES).split())
STATUS = re.compile(r"RUNNING  rec/s [\d,]+ \(last [\d.]+ s\)  processed [\d,]+  lag 0:[\d,]+ 1:[\d,]+  "
                    r"tasks \d+  last commit")
LIVE_STATUS = re.compile(STATUS.pattern + r" [^\n]*")
PLAIN_STATUS = re.compile(r"\d\d:\d\d:\d\d " + STATUS.pattern)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SPARK_CHATTER = ("Using incubator modules", "Using Spark's default log4j profile",
                 "Setting default log level", "To adjust logging level", "NativeCodeLoader",
                 "resolves to a loopback address",
                 "Set SPARK_LOCAL_IP")
"""Spark's, Hadoop's and the JVM's start-up notices, which strom's sessions keep off the terminal."""


def _env(tmp_path: Path, app_id: str, **topics: str) -> dict[str, str]:
    return app_env(tmp_path / "state", app_id, **topics)


def _produce(bootstrap: str, topic: str) -> None:
    producer = clients.producer(bootstrap)
    for i, line in enumerate(LINES):
        producer.produce(topic, line.encode(), str(i).encode())
    assert producer.flush(30) == 0


@pytest.mark.spark
@pytest.mark.slow
def test_run_starts_an_embedded_broker_and_sigterm_stops_cleanly(tmp_path):
    process = subprocess.Popen(
        [STROM, "run", str(APP), "--master", "local[*]", "--status-interval", "1"],
        env=_env(tmp_path, "run-embedded"), stderr=subprocess.PIPE, text=True)
    output: list[str] = []
    try:
        assert process.stderr is not None
        bootstrap = None
        for line in process.stderr:
            output.append(line)
            if bootstrap is None and (found := re.search(r"embedded broker at (\S+)", line)):
                bootstrap = found.group(1)
                _produce(bootstrap, "lines")
            plain = [line for line in output if PLAIN_STATUS.match(line)]  # not a terminal: plain lines
            if len(plain) >= 2 and re.search(r"processed [1-9]", line) and read_counts(
                    bootstrap, "word-counts", 5) == EXPECTED:
                break
        else:
            pytest.fail("strom run ended before processing: " + "".join(output)[-3000:])
        assert "\x1b[" not in "".join(output)  # no terminal control codes
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=120)
        output.append(rest)
        assert process.returncode == 0, "".join(output)[-3000:]
        assert "stopped" in rest
        everything = "".join(output)
        assert re.search(r"start-up: Spark session [\d.]+ s", everything)
        assert re.search(r"start-up: first record committed [\d.]+ s after the application's start",
                         everything)
        assert not [line for line in output for chatter in SPARK_CHATTER if chatter in line]
        assert "Connection refused" not in rest, rest  # the consumers stop before the embedded broker
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
def test_a_failing_application_exits_non_zero_with_its_error(broker, tmp_path):
    bootstrap = broker.bootstrap_servers
    topic = f"run-fail-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {topic: 1})
    _produce(bootstrap, topic)
    app = tmp_path / "failing.py"
    app.write_text(
        "from strom.streams import Consumed, Produced, Serdes, StreamsBuilder\n"
        "S = Serdes.String()\n"
        "def explode(value):\n"
        "    raise ValueError('boom: this record cannot be processed')\n"
        "def build():\n"
        "    builder = StreamsBuilder()\n"
        f"    builder.stream({topic!r}, Consumed.with_(S, S)).map_values(explode).to('nowhere', "
        "Produced.with_(S, S))\n"
        f"    return builder.build(), {{'application.id': {topic!r}, 'state.dir': {str(tmp_path)!r}}}\n")
    result = subprocess.run([STROM, "run", str(app), "--bootstrap-servers", bootstrap,
                             "--master", "local[1]", "--status-interval", "60"],
                            capture_output=True, text=True, timeout=280)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    error = lines[-1]
    assert error.startswith("error: Application") and "boom: this record cannot be processed" in error
    # one readable account: the record, the exception, the user's own line; no Spark or JVM copies
    assert f"taskId=0_0, topic={topic}, partition=0, offset=0: ValueError" in error
    assert f"raised at {app}:4, in explode" in error
    assert len(lines) <= 10, result.stderr
    assert not [line for line in lines if line.lstrip().startswith(("at org.", "at java.", "at scala."))]
    assert "Traceback" not in result.stderr and "^^^" not in result.stderr


def test_an_app_that_returns_no_topology_fails_before_spark(tmp_path):
    app = tmp_path / "bad.py"
    app.write_text("def build():\n    return {'application.id': 'x'}\n")
    result = subprocess.run([STROM, "run", str(app), "--bootstrap-servers", "127.0.0.1:1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "must return (topology, props)" in result.stderr
    missing = subprocess.run([STROM, "run", "no_such_module:build"], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "Cannot import 'no_such_module'" in missing.stderr


SERDE_APP = ("from strom.kafka.serdes import Serde\nfrom strom.streams import StreamsBuilder\n"
             "class Registry(Serde):\n    def __init__(self):\n"
             "        raise RuntimeError('schema.registry.url is not set')\n"
             "def build():\n    builder = StreamsBuilder()\n    builder.stream('in').to('out')\n"
             "    return builder.build(), {{{{'application.id': 'x', {props}}}}}\n")
BAD_APPS = {
    "syntax": ("def build(:\n    pass\n", "at {app}:1: SyntaxError"),
    "import": ("import no_such_module_of_the_app\n", "at {app}:1, in <module>: ModuleNotFoundError"),
    "build": ("def helper():\n    return {{}}['x']\n\ndef build():\n    return helper()\n",
              "at {app}:2, in helper: KeyError: 'x'"),
    "no-source": ("from strom.streams import StreamsBuilder\ndef build():\n"
                  "    return StreamsBuilder().build(), {{'application.id': 'x'}}\n", "reads no topic"),
    "no-serde": (SERDE_APP.format(props=""), "needs a key serde and none is set"),
    "serde-name": (SERDE_APP.format(props="'default.key.serde': 'String', 'default.value.serde': 'Strnig'"),
                   "Invalid value 'Strnig' for configuration 'default.value.serde'"),
    "serde-build": (SERDE_APP.format(props="'default.key.serde': Registry, 'default.value.serde': 'String'"),
                    "at {app}:5, in __init__: RuntimeError: schema.registry.url is not set"),
}


@pytest.mark.parametrize("kind", sorted(BAD_APPS))
def test_a_bad_app_file_is_one_error_line_before_spark(tmp_path, kind):
    source, expected = BAD_APPS[kind]
    app = tmp_path / "app.py"
    app.write_text(source.format())
    result = subprocess.run([STROM, "run", str(app), "--bootstrap-servers", "127.0.0.1:1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert expected.format(app=app) in result.stderr, result.stderr


def test_a_bad_master_a_bad_runtime_key_and_no_broker_fail_before_spark(tmp_path):
    """In a second or two, one error line each (Spark's start-up is seconds and its errors pages)."""
    app = tmp_path / "app.py"
    app.write_text("from strom.streams import StreamsBuilder\ndef build():\n"
                   "    builder = StreamsBuilder()\n    builder.stream('in').to('out')\n"
                   "    return builder.build(), {'application.id': 'x', 'default.key.serde': 'String',\n"
                   "                             'default.value.serde': 'String'}\n")
    cases = [(["--master", "bogus://x"], "'bogus://x' is not a Spark master"),
             (["--config", "execution.mode=batch"], "execution.mode"),
             (["--bootstrap-servers", "127.0.0.1:1"], "No broker reachable at 127.0.0.1:1")]
    for args, expected in cases:
        result = subprocess.run([STROM, "run", str(app), *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Spark session" not in result.stderr


class Terminal:
    """A process on a pseudo-terminal of its own (its controlling tty, so Ctrl-C is SIGINT to its process
    group, as on a user's terminal); ``screen`` is everything it wrote, ANSI control codes removed."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its stdin, stdout, stderr and controlling terminal
            os.execve(argv[0], argv, env)
        self.raw = b""
        self.returncode: int | None = None

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace")).replace("\r", "\n")

    def read_until(self, done: Callable[[str], bool], timeout: float) -> bool:
        """Reads output until ``done(screen)``, the process closes the terminal, or ``timeout``."""
        deadline = time.monotonic() + timeout
        while not done(self.screen) and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.5)[0]:
                try:
                    self.raw += os.read(self.fd, 65536)
                except OSError:  # EIO: every process holding the terminal has exited
                    return done(self.screen)
        return done(self.screen)

    def ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")

    def wait(self, timeout: float) -> int | None:
        """The exit status, reading output meanwhile; None if still running after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.read_until(lambda _: False, 1.0)
                return self.returncode
            self.read_until(lambda _: False, 0.5)
        return None

    def close(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def _statuses(screen: str) -> list[str]:
    return [found.group(0).strip() for found in LIVE_STATUS.finditer(screen)]


CHATTY_APP = """
import logging, threading, time
from strom.streams import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder
S, L = Serdes.String(), Serdes.Long()
log = logging.getLogger("chatty")

def worker_log(line):  # on an executor's Python worker: its stderr reaches the terminal through Spark
    log.warning("worker log line for %r", line)
    return line

def driver_log():  # the driver's logging (as strom's own warnings) while the status line is live
    for n in range(1000):
        time.sleep(0.5)
        log.warning("driver log line %d", n)

def build():
    threading.Thread(target=driver_log, daemon=True).start()
    builder = StreamsBuilder()
    (builder.stream({lines!r}, Consumed.with_(S, S)).map_values(worker_log).flat_map_values(str.split)
        .group_by(lambda key, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts")).to_stream().to({counts!r}, Produced.with_(S, L)))
    return builder.build(), {{"application.id": {app_id!r}, "state.dir": {state!r},
                              "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 500}}
"""
"""The word count app, logging from its driver and from its processor while `strom run` shows its status."""


def _run_together(screen: str) -> list[str]:
    """The screen's lines where a log line and the status line share one line."""
    return [line for line in screen.splitlines()
            if "RUNNING" in line and re.search(r"(driver|worker) log line", line)]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
def test_on_a_terminal_the_status_line_is_live_and_ctrl_c_stops_cleanly(broker, tmp_path):
    """The status line is redrawn in place; log lines printed meanwhile (the driver's, and a processor's
    on a Python worker) go above it, never onto it."""
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    app_id, lines, counts = f"tty-{suffix}", f"tty-lines-{suffix}", f"tty-counts-{suffix}"
    clients.create_topics(bootstrap, {lines: 2, counts: 2})
    app = tmp_path / "chatty.py"
    app.write_text(CHATTY_APP.format(app_id=app_id, state=str(tmp_path / "state"), lines=lines,
                                     counts=counts))
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm-256color"}
    terminal = Terminal([STROM, "run", str(app), "--bootstrap-servers", bootstrap, "--master", "local[2]"],
                        env)
    try:
        assert terminal.read_until(lambda screen: _statuses(screen), 240), terminal.screen[-3000:]
        assert "\x1b[" in terminal.raw.decode(errors="replace")  # rich redraws the line in place
        _produce(bootstrap, lines)
        assert terminal.read_until(lambda screen: any(re.search(r"processed [1-9][\d,]*  lag 0:0 1:0", status)
                                                       for status in _statuses(screen)), 180), \
            terminal.screen[-3000:]
        assert read_counts(bootstrap, counts) == EXPECTED
        statuses = _statuses(terminal.screen)
        assert len(set(statuses)) > 1, statuses  # the line changes as the application runs
        assert re.search(r"processed 0\b", statuses[0]) and "last commit" in statuses[-1]
        assert not re.search(r"^\d\d:\d\d:\d\d RUNNING", terminal.screen, re.M)  # no plain periodic lines
        shown = terminal.screen[terminal.screen.index(statuses[0]):]  # from the first status line on
        assert re.search(r"^\S.* WARNING chatty: driver log line \d+$", shown, re.M), shown[-3000:]
        assert re.search(r"^worker log line for 'a b c'$", shown, re.M), shown[-3000:]
        assert _run_together(terminal.screen) == [], terminal.screen[-3000:]
        terminal.ctrl_c()
        assert terminal.wait(120) == 0, terminal.screen[-3000:]
        assert "stopped" in terminal.screen
    finally:
        terminal.close()


FLAKY_APP = """
import os
from strom.streams import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder
S, L = Serdes.String(), Serdes.Long()
MARKER = {marker!r}

def fail_{when}(line):
    if {condition}:
        raise ValueError("boom: the word counter failed")
    return line

def build():
    builder = StreamsBuilder()
    (builder.stream({topic!r}, Consumed.with_(S, S))
        .map_values(fail_{when})
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to({topic!r} + "-counts", Produced.with_(S, L)))
    return builder.build(), {{"application.id": {topic!r}, "state.dir": {state!r},
                              "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 200}}
"""
RAISE_ONCE = "not os.path.exists(MARKER) and os.open(MARKER, os.O_CREAT | os.O_EXCL) >= 0"


def _flaky_app(tmp_path: Path, broker, when: str, condition: str) -> tuple[Path, str]:
    topic = f"run-{when}-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {topic: 2, f"{topic}-counts": 2})
    _produce(broker.bootstrap_servers, topic)
    app = tmp_path / f"{when}.py"
    app.write_text(FLAKY_APP.format(marker=str(tmp_path / "raised"), when=when, condition=condition,
                                    topic=topic, state=str(tmp_path / "state")))
    return app, topic


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
def test_on_failure_restart_recovers_from_one_error_and_counts_exactly(broker, tmp_path):
    """The processor raises once mid-transaction (exactly_once_v2): the stream threads are replaced,
    resume from the committed offsets, and every word is counted once."""
    app, topic = _flaky_app(tmp_path, broker, "once", RAISE_ONCE)
    result = subprocess.run([STROM, "run", str(app), "--bootstrap-servers", broker.bootstrap_servers,
                             "--master", "local[2]", "--on-failure", "restart", "--until-caught-up"],
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "raised").exists()  # it did raise
    assert "replacing its stream threads in 1 s" in result.stderr and "boom" in result.stderr
    assert "caught up" in result.stderr
    assert read_counts(broker.bootstrap_servers, f"{topic}-counts") == EXPECTED


SHOUT_APP = """
import os
from strom.streams import Consumed, Produced, Serdes, StreamsBuilder
S = Serdes.String()

def shout(value):
    if value == "boom" and ({condition}):
        raise ValueError("boom: cannot shout this one")
    return value.upper()

def build():
    builder = StreamsBuilder()
    builder.stream({topic!r}, Consumed.with_(S, S)).map_values(shout).to({topic!r} + "-out",
                                                                       Produced.with_(S, S))
    return builder.build(), {{"application.id": {topic!r}, "state.dir": {state!r},
                              "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 200, {props}}}
"""


def _shout_app(tmp_path: Path, bootstrap: str, condition: str, props: str = "") -> tuple[Path, str]:
    """An application upper-casing ``a``, ``boom``, ``c`` whose processor raises on ``boom`` when
    ``condition`` holds (line 8 of the file); ``props`` adds to its configs."""
    topic = f"shout-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {topic: 1, f"{topic}-out": 1})
    producer = clients.producer(bootstrap)
    for value in ("a", "boom", "c"):
        producer.produce(topic, value.encode())
    assert producer.flush(30) == 0
    app = tmp_path / "shout.py"
    app.write_text(SHOUT_APP.format(condition=condition, topic=topic, state=str(tmp_path / "state"),
                                    props=props))
    return app, topic


def read_values(bootstrap: str, topic: str, count: int, timeout: float) -> list[str]:
    """Values read read_committed until ``count`` arrived or ``timeout``, and one second more (a
    duplicate would show)."""
    consumer = clients.consumer(bootstrap, **{"isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        values += [m.value().decode() for m in consumer.consume(100, 0.5) if m.error() is None]
        if len(values) >= count:
            deadline = min(deadline, time.monotonic() + 1)
    consumer.close()
    return values


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
def test_on_failure_restart_replaces_the_threads_and_keeps_running(broker, tmp_path):
    """Long-running (no --until-caught-up): the processor raises once under exactly_once_v2; the stream
    threads are replaced from the committed offsets, each record is output once, the app runs on."""
    app, topic = _shout_app(tmp_path, broker.bootstrap_servers,
                            f"not os.path.exists({str(tmp_path / 'raised')!r}) and "
                            f"os.open({str(tmp_path / 'raised')!r}, os.O_CREAT | os.O_EXCL) >= 0")
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        process = subprocess.Popen([STROM, "run", str(app), "--bootstrap-servers", broker.bootstrap_servers,
                                    "--master", "local[1]", "--on-failure", "restart",
                                    "--status-interval", "1"], stderr=stderr, text=True)
    try:
        values = read_values(broker.bootstrap_servers, f"{topic}-out", 3, 240)
        assert values == ["A", "BOOM", "C"], log.read_text()[-3000:]
        assert (tmp_path / "raised").exists()  # it did raise
        assert process.poll() is None, log.read_text()[-3000:]  # still running
        assert "replacement 1 of at most 3" in log.read_text()
        described = subprocess.run([STROM, "groups", "describe", topic, "-b", broker.bootstrap_servers],
                                   capture_output=True, text=True, timeout=120)
        assert "running (strom application, 1 instance(s))" in described.stderr, described.stderr
        reset = subprocess.run([STROM, "streams", "reset", topic, "-b", broker.bootstrap_servers,
                                "--state-dir", str(tmp_path / "elsewhere")], capture_output=True, text=True,
                               timeout=120)  # refused from any machine: a reset underneath would break it
        assert reset.returncode == 2 and f"error: Application {topic} is running: 1 instance(s) (strom " \
            f"{topic} driver on" in reset.stderr, reset.stderr
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()[-3000:]
        assert "error:" not in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
def test_on_failure_restart_ends_a_crash_loop_with_one_error_line(broker, tmp_path):
    """Replaced after 1, 2, 4 s, then one error line; the status line goes on during a back-off."""
    app, topic = _shout_app(tmp_path, broker.bootstrap_servers, "True")
    started = time.monotonic()
    result = subprocess.run([STROM, "run", str(app), "--bootstrap-servers", broker.bootstrap_servers,
                             "--master", "local[1]", "--on-failure", "restart", "--status-interval", "1"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    replaced = re.findall(r"boom: cannot shout this one.*\); replacing its stream threads in (\d+) s, "
                          r".*\(replacement (\d) of at most 3", result.stderr)
    assert replaced == [("1", "1"), ("2", "2"), ("4", "3")], result.stderr[-3000:]
    assert "failed again after 3 replacements within 600 s; it stops" in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == result.stderr.strip().splitlines()[-1], result.stderr[-3000:]
    assert errors[0].startswith("error: Application") and "boom: cannot shout this one" in errors[0]
    assert time.monotonic() - started > 7  # the back-offs were waited
    assert _status_lines_within(result.stderr, "replacing its stream threads in 4 s", 4) >= 1, result.stderr
    assert read_values(broker.bootstrap_servers, f"{topic}-out", 1, 2) == []


def _status_lines_within(stderr: str, logged: str, seconds: int) -> int:
    """Status lines (``HH:MM:SS ...``) printed in the ``seconds`` after the log line holding ``logged``."""
    at = re.search(rf"^\S+ (\d\d:\d\d:\d\d),\d+ .*{re.escape(logged)}", stderr, re.M)
    assert at is not None, stderr

    def second(clock: str) -> int:
        hours, minutes, seconds_ = map(int, clock.split(":"))
        return hours * 3600 + minutes * 60 + seconds_
    start = second(at.group(1))
    return sum(0 < (second(clock) - start) % 86400 < seconds
               for clock in re.findall(r"^(\d\d:\d\d:\d\d) ", stderr, re.M))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
def test_runtime_keys_in_props_and_config_micro_batches_with_a_metrics_endpoint(broker, tmp_path):
    """The Spark runtime's keys are known before Spark loads: execution.mode in the app's props,
    metrics.prometheus.port in --config; the endpoint is scraped over HTTP while micro-batches run."""
    app, topic = _shout_app(tmp_path, broker.bootstrap_servers, "False", '"execution.mode": "microbatch"')
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        process = subprocess.Popen([STROM, "run", str(app), "--bootstrap-servers", broker.bootstrap_servers,
                                    "--master", "local[1]", "--config", "metrics.prometheus.port=0",
                                    "--config", "realtime.batch.duration.ms=60000"], stderr=stderr, text=True)
    try:
        assert read_values(broker.bootstrap_servers, f"{topic}-out", 3, 240) == ["A", "BOOM", "C"], \
            log.read_text()[-3000:]
        url = re.search(r"metrics at (http://\S+)", log.read_text())
        assert url, log.read_text()[-3000:]
        deadline, scraped = time.monotonic() + 30, ""
        while time.monotonic() < deadline and not re.search(
                r'kafka_streams_stream_task_metrics_process_total\{[^}]*task_id="0_0"\} 3\.0', scraped):
            with urllib.request.urlopen(url.group(1), timeout=10) as response:
                scraped = response.read().decode()
            time.sleep(0.5)
        assert re.search(r'kafka_streams_stream_task_metrics_process_total\{[^}]*task_id="0_0"\} 3\.0',
                         scraped), scraped
        assert 'state="RUNNING"' in scraped
        assert process.poll() is None, log.read_text()[-3000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()[-3000:]
        assert "(local[1], microbatch mode)" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_broker_that_stops_answering_leaves_the_lag_unknown_not_the_application_stopped(tmp_path):
    """`strom broker` frozen (SIGSTOP) past the lag lookup's request timeout: the status line goes on
    every second with "lag unknown (reason)", the application runs on and shows its lag again once the
    broker answers."""
    port = free_port()
    broker_log = tmp_path / "broker.log"
    with broker_log.open("w") as output:
        broker = subprocess.Popen([STROM, "broker", "--data-dir", str(tmp_path / "data"), "--port",
                                   str(port)], stdout=output, stderr=subprocess.STDOUT)
    log = tmp_path / "stderr"
    process = None
    try:
        deadline = time.monotonic() + 60
        while "listening" not in broker_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        bootstrap = f"127.0.0.1:{port}"
        app, topic = _shout_app(tmp_path, bootstrap, "False")
        with log.open("w") as stderr:
            process = subprocess.Popen([STROM, "run", str(app), "--bootstrap-servers", bootstrap, "--master",
                                        "local[1]", "--status-interval", "1"], stderr=stderr, text=True)
        assert read_values(bootstrap, f"{topic}-out", 3, 240) == ["A", "BOOM", "C"], log.read_text()[-3000:]
        before = len(log.read_text())
        broker.send_signal(signal.SIGSTOP)
        time.sleep(40)  # the lookup's own request timeout is 30 s
        frozen = log.read_text()[before:]
        broker.send_signal(signal.SIGCONT)
        unknown = re.findall(r"RUNNING .* lag unknown \((.*?)\)  tasks", frozen)
        assert len(unknown) >= 10, frozen  # a line each second or so, none held up by the lookup
        assert any(reason.startswith("no answer from the brokers for") for reason in unknown), unknown
        failed = [reason for reason in unknown if not reason.startswith("no answer")]
        assert failed, unknown  # the lookup's own timeout: its error, then a retry
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not re.search(r"lag 0:0  tasks", log.read_text()[before:]
                                                            .split("lag unknown")[-1]):
            time.sleep(1)
        assert re.search(r"lag 0:0  tasks", log.read_text()[before:].split("lag unknown")[-1]), \
            log.read_text()[-3000:]
        assert process.poll() is None, log.read_text()[-3000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()[-3000:]
    finally:
        broker.send_signal(signal.SIGCONT)
        for running in (process, broker):
            if running is not None and running.poll() is None:
                running.kill()
                running.wait()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)  # its own Spark JVM starts on a host the session's Kafka cluster shares
def test_run_on_an_apache_kafka_cluster_until_caught_up(kafka_cluster, tmp_path):
    """The same application against the 3-node Apache Kafka cluster (-b), exactly-once, local Spark."""
    bootstrap = kafka_cluster.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    lines, counts = f"run-ak-lines-{suffix}", f"run-ak-counts-{suffix}"
    clients.create_topics(bootstrap, {lines: 2, counts: 2})
    _produce(bootstrap, lines)
    result = subprocess.run(
        [STROM, "run", str(APP), "--bootstrap-servers", bootstrap, "--master", "local[2]",
         "--until-caught-up", "--status-interval", "2"],
        env=_env(tmp_path, f"run-ak-{suffix}", lines=lines, counts=counts),
        capture_output=True, text=True, timeout=500)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "embedded broker" not in result.stderr
    assert STATUS.search(result.stderr) and "caught up" in result.stderr
    assert read_counts(bootstrap, counts) == EXPECTED
