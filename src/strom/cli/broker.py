"""`strom broker`: run the strom broker in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from strom.broker.config import LOCAL_DEFAULTS
from strom.broker.security.credentials import add_scram_user
from strom.broker.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, Mechanism
from strom.cli import output


def parse_config(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """`key=value` options as a dict (shared by the topic and broker commands)."""
    config = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value")
        config[key.strip()] = value.strip()
    return config


@click.group(invoke_without_command=True)
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
@click.option("--allow-unauthenticated-network-access", is_flag=True,
              help="Let a listener that does not authenticate clients (PLAINTEXT, or SSL without "
                   "ssl.client.auth=required) bind beyond loopback: anyone who reaches it can read and "
                   "write.")
@click.pass_context
def broker(ctx: click.Context, data_dir: Path, host: str, port: int, advertised_host: str | None,
           config: dict[str, str], metrics_port: int | None,
           allow_unauthenticated_network_access: bool) -> None:
    """Run a single-node Kafka-protocol broker (Ctrl-C stops it cleanly).

    A new consumer group starts at once (group.initial.rebalance.delay.ms=0, as for an embedded
    broker); pass --config group.initial.rebalance.delay.ms=3000 for Kafka's default.
    `strom broker add-user` adds a SASL user to a stopped broker's data directory."""
    if ctx.invoked_subcommand is not None:
        return
    from strom.broker.broker import Broker, serve  # here: commands importing parse_config need no broker
    from strom.broker.metrics import BrokerCollector
    from strom.prometheus import MetricsServer

    logging.getLogger("strom.broker").setLevel(min(logging.getLogger().level, logging.INFO))
    logging.getLogger("strom.broker.broker").addFilter(_said_on_the_console)
    console = output.console(stderr=True)
    # the metrics port first: a taken one fails before the data directory is made
    metrics = MetricsServer([], metrics_port, host) if metrics_port is not None else None
    instance = Broker(data_dir, host, port, {**LOCAL_DEFAULTS, **config}, advertised_host,
                      allow_unauthenticated_network=allow_unauthenticated_network_access)
    if metrics is not None:
        metrics.registry.register(BrokerCollector(instance))

    def ready(running: Broker) -> None:
        for listener in running.listeners:
            console.print(f"strom broker listening on [bold]{listener.host or '0.0.0.0'}:{listener.port}"
                          f"[/bold] ({_named(listener.name, listener.spec.protocol)}; clients connect to "
                          f"{listener.advertised_host}:{listener.advertised_port}), data in "
                          f"{running.data_dir} (Ctrl-C to stop)", soft_wrap=True, markup=True)
        if metrics is not None:
            console.print(f"metrics at {metrics.url}")

    asyncio.run(serve(instance, ready))
    console.print("strom broker stopped; logs flushed and closed")


def _named(listener: str, protocol: str) -> str:
    """A listener's name, and its protocol where the name does not say it (``PLAINTEXT``, not twice)."""
    return listener if listener == protocol else f"{listener}, {protocol}"


def _said_on_the_console(record: logging.LogRecord) -> bool:
    """The broker logs that it listens and that it stopped (for a log file); `strom broker` says both
    on its console, once, so those log lines are left out there."""
    return not record.getMessage().startswith(("strom broker listening", "strom broker stopped"))


@broker.command("add-user")
@click.argument("name")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("data"),
              show_default=True, help="Data directory of the (stopped) broker.")
@click.option("--mechanism", "mechanisms", multiple=True, default=("SCRAM-SHA-256", "SCRAM-SHA-512"),
              show_default=True, help="SCRAM mechanism to store a credential for; repeatable. PLAIN logins "
                                      "are checked against these credentials.")
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), default=DEFAULT_ITERATIONS,
              show_default=True, help="PBKDF2 iterations of the stored credential.")
@click.option("--password-stdin", is_flag=True,
              help="Read the password from the first line of stdin (otherwise it is prompted for).")
def add_user(name: str, data_dir: Path, mechanisms: tuple[str, ...], iterations: int,
             password_stdin: bool) -> None:
    """Add (or change the password of) SASL user NAME in a stopped broker's data directory.

    A running broker takes users over the wire instead (AlterUserScramCredentials, e.g. Kafka's
    kafka-configs.sh --alter --entity-type users)."""
    if password_stdin:
        password = click.get_text_stream("stdin").readline().rstrip("\r\n")
    else:
        password = click.prompt(f"Password for {name}", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.BadParameter("the password is empty", param_hint="password")
    try:
        chosen = [Mechanism.named(m) for m in mechanisms]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--mechanism") from None
    add_scram_user(data_dir, name, password, chosen, iterations)
    names = ", ".join(m.mechanism_name for m in chosen)
    output.console(stderr=True).print(f"user {name} added to {data_dir} ({names}; principal User:{name})")
