"""`strom tasks run`: run a Decaton-style processor over a topic with a live status line."""

from __future__ import annotations

import importlib
import signal
import sys
import threading
import time
from typing import Any

import click
from rich.live import Live
from rich.text import Text

from strom.cli import output
from strom.cli.connection import Connection, connection_options, create_topic_option
from strom.errors import ConfigError
from strom.prometheus import MetricsServer
from strom.tasks import (
    FilePropertySupplier,
    ProcessorProperties,
    ProcessorsBuilder,
    ProcessorSubscription,
    SubscriptionBuilder,
)
from strom.tasks.prometheus import SubscriptionCollector

_REFRESH_S = 0.5


def load_processor(spec: str) -> Any:
    """``module:name`` → the processor: an object with ``process``, a function, or a class to instantiate."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"Processor {spec!r} must be given as module:name, e.g. myapp.tasks:SendMail.")
    sys.path.insert(0, ".")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Cannot load processor {spec!r}: {exc}. Check the module is importable from "
                          "the current directory or PYTHONPATH.") from exc
    return target() if isinstance(target, type) else target


def _parse_properties(pairs: tuple[str, ...], concurrency: int | None) -> dict[str, str]:
    values = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--property {pair!r} must look like name=value, "
                              "e.g. decaton.max.pending.records=1000.")
        ProcessorProperties.definition(name.strip()).parse(value)
        values[name.strip()] = value
    if concurrency is not None:
        values[ProcessorProperties.PARTITION_CONCURRENCY.name] = str(concurrency)
    return values


def _status(subscription: ProcessorSubscription, rate: float) -> Text:
    snapshots = subscription.metrics()
    pending = sum(s.pending for s in snapshots)
    lag = sum(s.commit_lag for s in snapshots)
    p99 = max((s.latency_p99_ms for s in snapshots), default=0.0)
    return Text(f"tasks/s {rate:,.0f}  pending {pending:,}  committed lag {lag:,}  p99 {p99:,.1f} ms  "
                f"partitions {len(snapshots)}")


def _completed(subscription: ProcessorSubscription) -> int:
    return sum(s.completed for s in subscription.metrics())


@click.group()
def tasks() -> None:
    """Decaton-style concurrent task processing."""


@tasks.command()
@click.argument("processor")
@click.option("--topic", required=True, help="Topic of the tasks.")
@click.option("--subscription", "subscription_id", required=True,
              help="Subscription id: the consumer group.")
@connection_options
@create_topic_option
@click.option("--concurrency", type=click.IntRange(1, 1024), help="decaton.partition.concurrency.")
@click.option("--property", "properties", multiple=True, metavar="NAME=VALUE",
              help="A decaton.* property (repeatable).")
@click.option("--property-file", type=click.Path(dir_okay=False),
              help="JSON file of decaton.* properties, re-read when it changes (dynamic properties).")
@click.option("--retry", is_flag=True,
              help="Enable retries through <topic>-retry (Decaton's) and <topic>-dlq (strom's dead letters): "
                   "a task is retried when the processor calls context.retry(), not when it raises.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: any free port).")
def run(processor: str, topic: str, subscription_id: str, connection: Connection, create_topic: bool,
        concurrency: int | None, properties: tuple[str, ...], property_file: str | None, retry: bool,
        metrics_port: int | None) -> None:
    """Run PROCESSOR (module:name) over TOPIC until interrupted, then drain, commit and stop."""
    suppliers: list[Any] = [_parse_properties(properties, concurrency)]
    if property_file:
        suppliers.append(FilePropertySupplier(property_file))
    target = load_processor(processor)
    connection.topic(topic, create=create_topic, offers_create=True, needs="Write")
    builder = (SubscriptionBuilder.new_builder(subscription_id)
               .processors_builder(ProcessorsBuilder.consuming(topic).then_process(target))
               .properties(*suppliers)
               .consumer_config({**connection.properties, "bootstrap.servers": connection.bootstrap_servers}))
    if retry:
        builder.enable_retry()
    subscription = builder.build_and_start()
    stop = threading.Event()

    def request_stop(*_: Any) -> None:
        # the loop ends at its next tick rather than on a KeyboardInterrupt inside the status line's
        # update; a second Ctrl-C interrupts the drain
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored: started in a script's background
        signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    console = output.console(stderr=True)
    if metrics_port is not None:
        console.print(f"metrics at {MetricsServer([SubscriptionCollector(subscription)], metrics_port).url}")
    last_count, last_time = 0, time.monotonic()
    try:
        with Live(_status(subscription, 0.0), console=console, refresh_per_second=4) as live:
            while not stop.wait(_REFRESH_S) and subscription.is_alive():
                now, count = time.monotonic(), _completed(subscription)
                live.update(_status(subscription, max(0, count - last_count) / (now - last_time)))
                last_count, last_time = count, now
    finally:
        console.print("stopping: draining in-flight tasks and committing...")
        subscription.close()
    console.print("stopped")
