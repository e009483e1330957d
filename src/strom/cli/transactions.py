"""`strom transactions list|describe`: the transactions a broker's coordinator knows about."""

from __future__ import annotations

import datetime

import click
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.static.primitive import i64
from rich.console import Console
from rich.table import Table

from strom.errors import StromError, TransactionalIdNotFoundError
from strom.kafka.wire import WireClient

_bootstrap = click.option("--bootstrap-servers", envvar="STROM_BOOTSTRAP_SERVERS", default="127.0.0.1:9092",
                          show_default=True, help="Kafka bootstrap servers (env STROM_BOOTSTRAP_SERVERS).")


@click.group()
def transactions() -> None:
    """Inspect transactions (ListTransactions / DescribeTransactions)."""


@transactions.command("list")
@_bootstrap
@click.option("--state", "states", multiple=True,
              help="Only transactions in this state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
                   "CompleteCommit, CompleteAbort); repeatable.")
@click.option("--producer-id", "producer_ids", type=int, multiple=True,
              help="Only this producer id; repeatable.")
@click.option("--min-duration-ms", type=int, default=-1,
              help="Only transactions open at least this long (implies Ongoing).")
def list_command(bootstrap_servers: str, states: tuple[str, ...], producer_ids: tuple[int, ...],
                 min_duration_ms: int) -> None:
    """One line per transactional id: producer id and state."""
    with WireClient(bootstrap_servers) as client:
        response = client.send(ListTransactionsRequest(
            state_filters=states, producer_id_filters=tuple(i64(p) for p in producer_ids),
            duration_filter=i64(min_duration_ms)))
    _raise_for(response.error_code, "ListTransactions")
    if response.unknown_state_filters:
        raise StromError(f"Unknown transaction state(s): {', '.join(response.unknown_state_filters)}. "
                         "Use Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit or CompleteAbort.")
    table = Table("transactional.id", "producer id", "state")
    for state in sorted(response.transaction_states, key=lambda s: s.transactional_id):
        table.add_row(state.transactional_id, str(state.producer_id), state.transaction_state)
    Console().print(table)


@transactions.command("describe")
@_bootstrap
@click.argument("transactional_ids", nargs=-1, required=True)
def describe_command(bootstrap_servers: str, transactional_ids: tuple[str, ...]) -> None:
    """State, producer id and epoch, timeout, start time and partitions of transactional ids."""
    with WireClient(bootstrap_servers) as client:
        response = client.send(DescribeTransactionsRequest(transactional_ids=transactional_ids))
    console = Console()
    missing = []
    for state in response.transaction_states:
        if state.error_code == ErrorCode.transactional_id_not_found:
            missing.append(state.transactional_id)
            continue
        _raise_for(state.error_code, f"DescribeTransactions({state.transactional_id})")
        partitions = ", ".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
        grid = Table.grid(padding=(0, 2))
        for name, value in (("transactional.id", state.transactional_id),
                            ("state", state.transaction_state),
                            ("producer id", str(state.producer_id)),
                            ("producer epoch", str(state.producer_epoch)),
                            ("timeout ms", str(int(state.transaction_timeout.total_seconds() * 1000))),
                            ("started", _started(state.transaction_start_time)),
                            ("partitions", partitions or "-")):
            grid.add_row(name, value)
        console.print(grid, soft_wrap=True)
        console.print()
    if missing:
        raise TransactionalIdNotFoundError(
            f"Transactional id(s) not known to the broker at {bootstrap_servers}: {', '.join(missing)}. "
            "`strom transactions list` shows the known ones.")


def _started(moment: datetime.datetime) -> str:
    if moment.timestamp() <= 0:
        return "-"
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _raise_for(code: ErrorCode, what: str) -> None:
    if code != ErrorCode.none:
        raise StromError(f"{what} failed with {code.name.upper()}; check the broker log.")
