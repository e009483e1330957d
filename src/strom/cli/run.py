"""`strom run APP`: run a topology on Spark with a live status line until stopped.

APP is a Python file whose ``build()`` returns ``(topology, props)``, or ``module:function``. Without
bootstrap servers (option or ``bootstrap.servers`` in props) an embedded broker is started and the
topology's source topics are created in it. SIGINT/SIGTERM stop the application cleanly (exit 0); a
failed application exits with its error. Spark is imported only here, when the command runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.text import Text

from strom.cli import output
from strom.cli.broker import parse_config
from strom.cli.query import QUERY_PORT_CONFIG, query_port_option
from strom.cli.spark_session import spark_session_starting
from strom.errors import BrokerUnavailableError, ConfigError, ProcessingError, StromError, raised_at
from strom.streams.config import (
    BOOTSTRAP_SERVERS,
    EXECUTION_MODE,
    UNCAUGHT_EXCEPTION_HANDLER,
    StreamsConfig,
)
from strom.streams.processor.topology import Topology

log = logging.getLogger(__name__)

_TERMINAL_REFRESH_S = 1.0
ON_FAILURE = {"restart": "REPLACE_THREAD", "shutdown": "SHUTDOWN_CLIENT"}


def load_application(spec: str) -> tuple[Topology, dict[str, Any]]:
    """Calls APP's builder: ``path/to/app.py`` (its ``build()``) or ``module:function``."""
    try:
        builder = _builder(spec)
        result = builder()
    except StromError:
        raise
    except Exception as exc:  # the app's own code: where it failed, in one line, not import machinery
        log.info("Loading %s failed:", spec, exc_info=exc)
        where = raised_at(exc)
        raise ConfigError(f"Loading {spec} failed{f' at {where}' if where else ''}: {type(exc).__name__}: "
                          f"{exc}. Fix the application (`strom -v run ...` prints the traceback).") from exc
    if (not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[0], Topology)
            or not isinstance(result[1], Mapping)):
        raise ConfigError(f"{spec} must return (topology, props): a Topology from StreamsBuilder.build() "
                          f"and a dict of configs; it returned {type(result).__name__}.")
    return result[0], dict(result[1])


def _builder(spec: str) -> Callable[[], Any]:
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"Application file {spec} does not exist.")
        module = _load_file(path)
        attr = "build"
    else:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise ConfigError(f"APP {spec!r} must be a Python file (app.py, with build()) or "
                              "module:function, e.g. myapp.topology:build.")
        sys.path.insert(0, ".")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"Cannot import {module_name!r}: {exc}. Check it is importable from the "
                              "current directory or PYTHONPATH.") from exc
    builder = getattr(module, attr, None)
    if not callable(builder):
        raise ConfigError(f"{spec} has no function {attr}() returning (topology, props).")
    return builder


def _load_file(path: Path) -> Any:
    """Loads the file as a module whose functions and classes Spark ships to executors by value (the
    executors cannot import a script by name)."""
    from pyspark import cloudpickle

    name = f"strom_app_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


def _source_topics(topology: Topology) -> list[str]:
    builder = topology.internal
    internal = builder.internal_topics
    return sorted({t for sub in builder.subtopologies() for t in sub.source_topics if t not in internal})


@contextmanager
def _bootstrap(props: dict[str, Any], topology: Topology, console: Console) -> Iterator[str]:
    """The configured brokers, or an embedded broker (with the topology's source topics) while running."""
    if props.get("bootstrap.servers"):
        yield str(props["bootstrap.servers"])
        return
    from strom.broker import EmbeddedBroker
    from strom.kafka import clients

    with EmbeddedBroker() as broker:
        topics = _source_topics(topology)
        clients.create_topics(broker.bootstrap_servers, dict.fromkeys(topics, 1))
        console.print(f"embedded broker at {broker.bootstrap_servers} (source topics {', '.join(topics)}; "
                      f"produce with: strom produce --bootstrap-servers {broker.bootstrap_servers} TOPIC)")
        yield broker.bootstrap_servers


def status_line(status: Any, tasks: int, window_s: float) -> str:
    """``RUNNING  rec/s 1,234 (last 5 s)  processed 10,000  lag 0:120 1:0  tasks 4  last commit 0.3 s ago``:
    the rate counts records committed in the window (figures move at commits)."""
    lag = " ".join(f"{sub}:{n:,}" for sub, n in sorted(status.lag_by_subtopology.items())) or "-"
    if status.lag_unknown is not None:
        lag = f"unknown ({status.lag_unknown})"
    commit = "-" if status.last_commit_age_s is None else f"{status.last_commit_age_s:.1f} s ago"
    if status.last_commit_age_s is not None and status.lag_unknown is None and not any(
            status.lag_by_subtopology.values()):
        commit += " (idle: every input record committed)"
    return (f"{status.state}  rec/s {status.rate:,.0f} (last {window_s:g} s)  processed {status.records:,}  "
            f"lag {lag}  tasks {tasks}  last commit {commit}")


@click.command()
@click.argument("app")
@click.option("-b", "--bootstrap-servers", envvar="STROM_BOOTSTRAP_SERVERS", default=None,
              help="Kafka brokers (env STROM_BOOTSTRAP_SERVERS); overrides bootstrap.servers in props. "
                   "Without either, an embedded broker is started. Security settings are configs: "
                   "--config security.protocol=SASL_SSL --config sasl.mechanism=PLAIN ...")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master: local[N], local[*] or spark://host:port.")
@click.option("--config", "configs", multiple=True, callback=parse_config, metavar="KEY=VALUE",
              help="A StreamsConfig key overriding props (repeatable), e.g. commit.interval.ms=1000.")
@click.option("--spark-conf", "spark_conf", multiple=True, callback=parse_config, metavar="KEY=VALUE",
              help="A Spark config (repeatable), e.g. spark.executor.memory=2g.")
@click.option("--on-failure", type=click.Choice(["restart", "shutdown"]), default=None,
              help="When APP's code raises: restart its stream threads from the committed offsets (a few "
                   "times, with a back-off; strom.uncaught.exception.handler=REPLACE_THREAD) or stop with "
                   "the error (SHUTDOWN_CLIENT, the default). A handler set in code wins.")
@query_port_option
@click.option("--until-caught-up", is_flag=True, help="Stop once every input record is committed.")
@click.option("--status-interval", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="Seconds between status lines when not on a terminal.")
def run(app: str, bootstrap_servers: str | None, master: str, configs: dict[str, str],
        spark_conf: dict[str, str], on_failure: str | None, query_port: int | None, until_caught_up: bool,
        status_interval: float) -> None:
    """Run APP (app.py with build(), or module:function) on Spark until Ctrl-C or SIGTERM."""
    console = output.console(stderr=True)
    _check_master(master)
    topology, props = load_application(app)
    if not _source_topics(topology):
        raise ConfigError(f"{app}'s topology reads no topic, so it has nothing to process: give it a source "
                          "(builder.stream('topic'), builder.table('topic')).")
    props.update(configs)
    if on_failure is not None:
        props[UNCAUGHT_EXCEPTION_HANDLER] = ON_FAILURE[on_failure]
    if bootstrap_servers:
        props["bootstrap.servers"] = bootstrap_servers
    if query_port is not None:
        props[QUERY_PORT_CONFIG] = query_port
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with ExitStack() as stack:
            config = _checked_config(props)  # a bad config fails before Spark starts
            _check_tasks(app, topology, config)
            app_id = config.application_id
            if props.get("bootstrap.servers"):
                _check_brokers(config)  # in a second, not after Spark's start-up
            console.print(f"starting {app_id} on Spark ({master}, {config[EXECUTION_MODE]} mode)")
            session = _SessionStarting(f"strom-{app_id}", master, spark_conf)
            stack.callback(session.stop_unless_taken)
            session.embedded_broker = not props.get("bootstrap.servers")
            props["bootstrap.servers"] = stack.enter_context(_bootstrap(props, topology, console))
            streams = _start(stack, topology, props, session, console)
            try:
                _watch(streams, stop, until_caught_up, status_interval, console)
            except ProcessingError as exc:  # the error line says what failed where; -v adds the trace
                log.info("The application's failure in full:", exc_info=exc)
                raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    console.print("stopped")


_MASTER = re.compile(r"local(\[(\d+|\*)(, *\d+)?\])?|(spark|k8s|mesos)://\S+|yarn")


def _check_master(master: str) -> None:
    if not _MASTER.fullmatch(master):
        raise click.BadParameter(f"{master!r} is not a Spark master: give local, local[N], local[*], "
                                 "spark://host:port, yarn or k8s://https://host:port.", param_hint="--master")


def _check_brokers(config: StreamsConfig) -> None:
    """Fails at once, with the reason, when no broker answers (as every other command does)."""
    from strom.cli.connection import Connection

    settings = {key: str(value) for key, value in config.client_props("admin.").items()}
    Connection(config[BOOTSTRAP_SERVERS], settings).metadata()


def _check_tasks(app: str, topology: Topology, config: StreamsConfig) -> None:
    """Builds each sub-topology's task once, as ``SparkStreams.start()`` does, before Spark starts: a
    serde missing, misnamed or failing to build is one error line in a second, not after Spark's start-up."""
    from strom.spark.runtime.plan import check_tasks_build

    try:
        check_tasks_build(topology, config)
    except StromError:
        raise
    except Exception as exc:  # the app's serde or processor supplier raised
        log.info("Building %s's tasks failed:", app, exc_info=exc)
        where = raised_at(exc)
        raise ConfigError(f"Building {app}'s tasks failed{f' at {where}' if where else ''}: "
                          f"{type(exc).__name__}: {exc}. Check its serdes (Consumed, Produced, Materialized, "
                          "default.key.serde, default.value.serde) and processor suppliers.") from exc


def _checked_config(props: dict[str, Any]) -> StreamsConfig:
    """The validated config; the embedded broker's address is not known yet."""
    return StreamsConfig({"bootstrap.servers": "localhost:9092", **props})


class _SessionStarting:
    """The Spark session, built in a thread while the embedded broker starts: the JVM's start-up
    (seconds) and the broker's then overlap on a machine with two cores or more."""

    def __init__(self, app_name: str, master: str, spark_conf: dict[str, str]) -> None:
        self._started = time.monotonic()
        self._taken = False
        self.embedded_broker = False
        self._future = spark_session_starting(app_name, master, spark_conf, strom_format=False)

    def take(self, console: Console) -> Any:
        """The session once started (a failure to start it is raised here), printed with its time."""
        self._taken = True
        spark = self._future.result()
        beside = " (started with the embedded broker)" if self.embedded_broker else ""
        console.print(f"start-up: Spark session {time.monotonic() - self._started:.1f} s{beside}")
        return spark

    def stop_unless_taken(self) -> None:
        """Stops a session that started while something else failed (the broker, the application)."""
        if not self._taken and self._future.exception() is None:
            self._future.result().stop()


def _start(stack: ExitStack, topology: Topology, props: dict[str, Any], session: _SessionStarting,
           console: Console) -> Any:
    from strom.spark.runtime import SparkStreams

    console.print(f"brokers {props['bootstrap.servers']}")
    spark = session.take(console)
    stack.callback(spark.stop)
    streams = SparkStreams(topology, props, spark)
    streams.start()
    stack.callback(_stop, streams, console)
    if streams.metrics_url:
        console.print(f"metrics at {streams.metrics_url}")
    if streams.query_url:
        console.print(f"queries at {streams.query_url}/stores/<store>/keys/<key>")
    return streams


def _stop(streams: Any, console: Console) -> None:
    console.print("stopping: letting the running batch commit...")
    streams.stop()


def _watch(streams: Any, stop: threading.Event, until_caught_up: bool, interval: float,
           console: Console) -> None:
    """Prints status until stopped (SIGTERM, Ctrl-C, caught up) or the application fails (raises)."""
    from strom.spark.metrics import StatusReader

    reader = StatusReader(streams)
    tasks = len(streams.plan.task_ids)
    refresh = _TERMINAL_REFRESH_S if console.is_terminal else interval
    live = Live(Text(""), console=console, refresh_per_second=4) if console.is_terminal else None
    started, first_record = time.monotonic(), False
    try:
        with live or ExitStack(), _logging_above(live):
            while not stop.is_set():
                if until_caught_up and _caught_up(streams, refresh, console):
                    console.print("caught up: every input record is committed")
                    break
                if not until_caught_up and streams.await_termination(refresh):
                    raise ProcessingError(f"Application {streams.config.application_id} stopped without an "
                                          "error and without being asked to (see the log above); start it "
                                          "again.")
                status = reader.read()
                if not first_record and status.records:
                    first_record = True
                    console.print(f"start-up: first record committed {time.monotonic() - started:.1f} s "
                                  "after the application's start (with any wait for input; at most one "
                                  "status interval late)")
                line = status_line(status, tasks, refresh)
                if live is not None:
                    live.update(Text(line))
                else:
                    console.print(f"{time.strftime('%H:%M:%S')} {line}", highlight=False, soft_wrap=True)
    except KeyboardInterrupt:
        pass


def _caught_up(streams: Any, timeout: float, console: Console) -> bool:
    """Whether every input record is committed; not yet while the brokers do not say (the application
    runs on: only its own failure stops it)."""
    try:
        return bool(streams.wait_until_caught_up(timeout))
    except BrokerUnavailableError as exc:
        console.print(f"caught up: not known yet ({' '.join(str(exc).split())})", highlight=False,
                      soft_wrap=True)
        return False


@contextmanager
def _logging_above(live: Live | None) -> Iterator[None]:
    """While the status line is live, log lines (the driver's, and Spark's JVM's with its Python workers'
    output) go through rich's stand-in for stderr, which prints them above the line instead of into it."""
    from strom.spark import quiet_logging

    original = getattr(sys.stderr, "rich_proxied_file", None)  # set while the Live redirects stderr
    if live is None or original is None:
        yield
        return
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler) and h.stream is original]
    previous = [(handler, handler.setStream(sys.stderr)) for handler in handlers]
    try:
        with quiet_logging.jvm_lines_to(sys.stderr.write):
            yield
    finally:
        for handler, stream in previous:
            handler.setStream(stream)
