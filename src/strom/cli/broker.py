"""`strom broker`: run the strom broker in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from strom.broker.broker import Broker, serve
from strom.broker.config import LOCAL_DEFAULTS
from strom.broker.metrics import BrokerCollector
from strom.cli import output
from strom.prometheus import MetricsServer


def parse_config(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """`key=value` options as a dict (shared by the topic and broker commands)."""
    config = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value")
        config[key.strip()] = value.strip()
    return config


@click.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("data"),
              show_default=True, help="Directory of the topic logs and broker state.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=9092, show_default=True, help="Port to listen on (0: any free).")
@click.option("--advertised-host", default=None,
              help="Host name clients are told to connect to (default: --host; this machine's name "
                   "when --host is 0.0.0.0). advertised.listeners sets host and port.")
@click.option("--config", "config", multiple=True, callback=parse_config, metavar="KEY=VALUE",
              help="Broker config with Kafka's name, e.g. num.partitions=3; repeatable.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (0: any free), at /metrics on --host.")
def broker(data_dir: Path, host: str, port: int, advertised_host: str | None, config: dict[str, str],
           metrics_port: int | None) -> None:
    """Run a single-node Kafka-protocol broker (Ctrl-C stops it cleanly).

    A new consumer group starts at once (group.initial.rebalance.delay.ms=0, as for an embedded
    broker); pass --config group.initial.rebalance.delay.ms=3000 for Kafka's default."""
    logging.getLogger("strom.broker").setLevel(min(logging.getLogger().level, logging.INFO))
    console = output.console(stderr=True)
    # the metrics port first: a taken one fails before the data directory is made
    metrics = MetricsServer([], metrics_port, host) if metrics_port is not None else None
    instance = Broker(data_dir, host, port, {**LOCAL_DEFAULTS, **config}, advertised_host)
    if metrics is not None:
        metrics.registry.register(BrokerCollector(instance))

    def ready(running: Broker) -> None:
        console.print(f"strom broker listening on [bold]{running.host}:{running.port}[/bold] (clients "
                      f"connect to {running.advertised_host}:{running.advertised_port}), data in "
                      f"{running.data_dir} (Ctrl-C to stop)", soft_wrap=True)
        if metrics is not None:
            console.print(f"metrics at {metrics.url}")

    asyncio.run(serve(instance, ready))
    console.print("strom broker stopped; logs flushed and closed")
