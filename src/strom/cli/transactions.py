"""`strom transactions list|describe|describe-producers|find-hanging|abort`: transactions the broker
coordinates, the producers writing to partitions, and the abort of hanging transactions
(kafka-transactions)."""

import datetime
import time
from dataclasses import dataclass, field
from typing import ClassVar

import click
from confluent_kafka.admin import ClusterMetadata
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from strom.cli.connection import Connection, connection_options
from strom.cli.output import output_option, print_record, print_rows
from strom.errors import StromError, TransactionalIdNotFoundError
from strom.kafka.security import authorization_error
from strom.kafka.wire import WireClient


@click.group()
def transactions() -> None:
    """Inspect and abort transactions (kafka-transactions)."""


# kio reads these schemas from their annotations as objects: this module has no
# ``from __future__ import annotations``.
@dataclass(frozen=True, slots=True, kw_only=True)
class _TransactionState:
    """DescribeTransactions v0's TransactionState with the start time as the plain int64 Kafka sends:
    -1 when no transaction runs (kio reads it as a datetime and refuses -1)."""

    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: str = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _DescribeTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[_TransactionState, ...]


_ELSEWHERE = (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
              ErrorCode.coordinator_not_available)
"""A broker's answer for a transactional id it does not coordinate (or not yet: still loading)."""
_RETRIES = 20
_RETRY_S = 0.5


def _wire(connection: Connection, broker: str | None = None) -> WireClient:
    """A protocol client for the APIs librdkafka does not expose, to one broker (``host:port``; default
    the first bootstrap server), logged in as the connection's settings say."""
    return WireClient(broker or connection.bootstrap_servers, settings=connection.properties)


def _brokers(connection: Connection) -> dict[int, str]:
    """Every broker of the cluster by id, as ``host:port``: each coordinates a share of the
    transactional ids and leads a share of the partitions."""
    return {b.id: f"{b.host}:{b.port}" for b in connection.metadata().brokers.values()}


def _send_to_each(connection: Connection, request, response_schema: type | None = None) -> list:
    answers = []
    for broker in _brokers(connection).values():
        with _wire(connection, broker) as client:
            answers.append(client.send(request, response_schema))
    return answers


def _list(connection: Connection, **filters) -> list:
    """ListTransactions of every broker, merged (as kafka-transactions list does)."""
    request = ListTransactionsRequest(
        state_filters=filters.get("states", ()), producer_id_filters=filters.get("producer_ids", ()),
        duration_filter=i64(filters.get("min_duration_ms", -1)))
    states = []
    for response in _send_to_each(connection, request):
        _raise_for(response.error_code, "ListTransactions")
        if response.unknown_state_filters:
            raise StromError(f"Unknown transaction state(s): {', '.join(response.unknown_state_filters)}. "
                             "Use Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit or "
                             "CompleteAbort.")
        states += response.transaction_states
    return sorted(states, key=lambda s: s.transactional_id)


def _describe(connection: Connection, transactional_ids: tuple[str, ...]) -> list:
    """The coordinator's view of each id; unknown ids are an error naming them. Each broker is asked
    and the coordinator of an id answers for it (the others say NOT_COORDINATOR); a coordinator still
    loading its share of __transaction_state is asked again."""
    found: dict[str, object] = {}
    for _ in range(_RETRIES):
        wanted = tuple(t for t in transactional_ids if t not in found)
        request = DescribeTransactionsRequest(transactional_ids=wanted)
        for response in _send_to_each(connection, request, _DescribeTransactionsResponse):
            for state in response.transaction_states:
                if state.error_code not in _ELSEWHERE:
                    found.setdefault(state.transactional_id, state)
        if len(found) == len(set(transactional_ids)):
            break
        time.sleep(_RETRY_S)
    unanswered = [t for t in transactional_ids if t not in found]
    if unanswered:
        raise StromError(f"No broker at {connection.bootstrap_servers} coordinates transactional id(s) "
                         f"{', '.join(unanswered)} yet (NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS "
                         "everywhere); try again once the cluster is up.")
    states = [found[t] for t in dict.fromkeys(transactional_ids)]
    missing = [s.transactional_id for s in states if s.error_code == ErrorCode.transactional_id_not_found]
    if missing:
        raise TransactionalIdNotFoundError(
            f"Transactional id(s) not known to the broker at {connection.bootstrap_servers}: "
            f"{', '.join(missing)}. `strom transactions list` shows the known ones.")
    for state in states:
        _raise_for(state.error_code, f"DescribeTransactions({state.transactional_id})", connection,
                   (state.transactional_id, "Describe"))
    return states


def _leader(metadata: ClusterMetadata, topic: str, partition: int) -> str:
    """``host:port`` of the partition's leader (DescribeProducers and WriteTxnMarkers go there)."""
    found = metadata.topics.get(topic)
    if found is None or partition not in found.partitions:
        raise StromError(f"Topic {topic!r} has no partition {partition}; see "
                         f"`strom topics describe {topic}`.")
    leader = found.partitions[partition].leader
    if leader not in metadata.brokers:
        raise StromError(f"{topic}-{partition} has no leader now (broker {leader} is not serving); try again "
                         "once the cluster elected one.")
    broker = metadata.brokers[leader]
    return f"{broker.host}:{broker.port}"


@transactions.command("list")
@connection_options
@click.option("--state", "states", multiple=True,
              help="Only transactions in this state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
                   "CompleteCommit, CompleteAbort); repeatable.")
@click.option("--producer-id", "producer_ids", type=click.IntRange(min=0), multiple=True,
              help="Only this producer id; repeatable.")
@click.option("--min-duration-ms", type=click.IntRange(min=-1), default=-1,
              help="Only transactions open at least this long (implies Ongoing).")
@output_option
def list_command(connection: Connection, states: tuple[str, ...], producer_ids: tuple[int, ...],
                 min_duration_ms: int, output: str) -> None:
    """One line per transactional id: producer id and state."""
    found = _list(connection, states=states, producer_ids=tuple(i64(p) for p in producer_ids),
                  min_duration_ms=min_duration_ms)
    rows = [{"transactional.id": s.transactional_id, "producer id": int(s.producer_id),
             "state": s.transaction_state} for s in found]
    print_rows(rows, ["transactional.id", "producer id", "state"], output)


def _fields(state) -> dict:
    return {"transactional.id": state.transactional_id, "state": state.transaction_state,
            "producer id": int(state.producer_id), "producer epoch": int(state.producer_epoch),
            "timeout ms": int(state.transaction_timeout.total_seconds() * 1000),
            "started": _time(state.transaction_start_time),
            "partitions": [f"{t.topic}-{p}" for t in state.topics for p in t.partitions]}


@transactions.command("describe")
@connection_options
@click.argument("transactional_ids", nargs=-1, required=True)
@output_option
def describe_command(connection: Connection, transactional_ids: tuple[str, ...], output: str) -> None:
    """State, producer id and epoch, timeout, start time and partitions of transactional ids."""
    for state in _describe(connection, transactional_ids):
        print_record(_fields(state), output)


def _producers(connection: Connection, topic: str, partitions: tuple[int, ...]) -> list[dict]:
    """Active producers of each partition (DescribeProducers), with their open transaction if any."""
    # a missing topic: its error
    chosen = partitions or tuple(sorted(connection.topic(topic, needs="Read").partitions))
    metadata = connection.metadata()
    by_leader: dict[str, list[int]] = {}
    for partition in chosen:
        by_leader.setdefault(_leader(metadata, topic, partition), []).append(partition)
    answers = []
    for broker, led in by_leader.items():
        with _wire(connection, broker) as client:
            answers += client.send(DescribeProducersRequest(
                topics=(TopicRequest(name=topic, partition_indexes=tuple(i32(p) for p in led)),))).topics
    rows = []
    for answer in answers:
        for partition in answer.partitions:
            if partition.error_code == ErrorCode.unknown_topic_or_partition:
                raise StromError(f"Topic {topic!r} has no partition {partition.partition_index}; see "
                                 f"`strom topics describe {topic}`.")
            _raise_for(partition.error_code, f"DescribeProducers({topic}-{partition.partition_index})",
                       connection, (topic, "Read"))
            rows += [{"topic": topic, "partition": int(partition.partition_index),
                      "producer id": int(p.producer_id), "producer epoch": int(p.producer_epoch),
                      "last sequence": int(p.last_sequence), "last timestamp": int(p.last_timestamp),
                      "coordinator epoch": int(p.coordinator_epoch),
                      "open transaction start offset": int(p.current_txn_start_offset)}
                     for p in partition.active_producers]
    return rows


_PRODUCER_COLUMNS = ["topic", "partition", "producer id", "producer epoch", "last sequence", "last timestamp",
                     "open transaction start offset"]


@transactions.command("describe-producers")
@connection_options
@click.option("--topic", required=True, help="Topic whose partitions' producers are listed.")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Only this partition; repeatable (default: every partition).")
@output_option
def describe_producers_command(connection: Connection, topic: str, partitions: tuple[int, ...],
                               output: str) -> None:
    """Producers writing to a topic's partitions: id, epoch, last sequence, open transaction."""
    _print_producers(_producers(connection, topic, partitions), output)


def _print_producers(rows: list[dict], output: str) -> None:
    """The producers' rows with their last timestamp as a time, not epoch milliseconds."""
    print_rows([{**row, "last timestamp": _time(row["last timestamp"])} for row in rows], _PRODUCER_COLUMNS,
               output)


@transactions.command("find-hanging")
@connection_options
@click.option("--topic", required=True, help="Topic whose partitions are searched.")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Only this partition; repeatable (default: every partition).")
@click.option("--max-transaction-timeout", type=click.IntRange(min=0), default=15, show_default=True,
              help="Minutes: a transaction open longer than the longest transaction timeout is a candidate.")
@output_option
def find_hanging_command(connection: Connection, topic: str, partitions: tuple[int, ...],
                         max_transaction_timeout: int, output: str) -> None:
    """Open transactions on partitions that their coordinator no longer completes (they hold back
    read_committed consumers). Abort one with `strom transactions abort`."""
    cutoff = time.time() * 1000 - max_transaction_timeout * 60_000
    candidates = [row for row in _producers(connection, topic, partitions)
                  if row["open transaction start offset"] >= 0 and row["last timestamp"] < cutoff]
    ongoing = {}
    if candidates:
        known = _list(connection, producer_ids=tuple(i64(r["producer id"]) for r in candidates))
        if known:
            described = _describe(connection, tuple(k.transactional_id for k in known))
            ongoing = {int(s.producer_id): s for s in described}
    hanging = [row for row in candidates if not _coordinated(row, ongoing.get(row["producer id"]))]
    _print_producers(hanging, output)


def _coordinated(row: dict, state) -> bool:
    """Whether the coordinator still runs this transaction (and will complete or time it out)."""
    return (state is not None and state.transaction_state == "Ongoing"
            and int(state.producer_epoch) == row["producer epoch"]
            and any(t.topic == row["topic"] and row["partition"] in t.partitions for t in state.topics))


@transactions.command("abort")
@connection_options
@click.option("--transactional-id",
              help="Abort the open transaction of this id (fences its producer, as a new instance would).")
@click.option("--topic", help="With --partition: abort a hanging transaction on this partition.")
@click.option("--partition", type=click.IntRange(min=0), help="The partition of the hanging transaction.")
@click.option("--producer-id", type=click.IntRange(min=0), help="The producer of the hanging transaction.")
@click.option("--start-offset", type=click.IntRange(min=0),
              help="Instead of --producer-id: the first offset of the hanging transaction.")
@click.option("--producer-epoch", type=click.IntRange(min=0, max=32767),
              help="Epoch of the abort marker (default: the producer's epoch on the partition).")
@click.option("--coordinator-epoch", type=click.IntRange(min=0),
              help="Coordinator epoch of the abort marker (default: the last one the partition saw).")
def abort_command(connection: Connection, transactional_id: str | None, topic: str | None,
                  partition: int | None, producer_id: int | None, start_offset: int | None,
                  producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    """Abort a transaction: by --transactional-id while its coordinator runs it, or a hanging one
    (see find-hanging) by --topic, --partition and --producer-id or --start-offset, which writes an
    abort marker into the partition (WriteTxnMarkers, as kafka-transactions abort does). Either way
    read_committed consumers move past its records."""
    hanging = (topic, partition, producer_id, start_offset, producer_epoch, coordinator_epoch)
    if transactional_id is not None and not any(v is not None for v in hanging):
        _abort_by_transactional_id(connection, transactional_id)
    elif transactional_id is None and topic is not None and partition is not None \
            and (producer_id is None) != (start_offset is None):
        _abort_hanging(connection, topic, partition, producer_id, start_offset, producer_epoch,
                       coordinator_epoch)
    else:
        raise click.UsageError("Give either --transactional-id, or --topic, --partition and exactly one of "
                               "--producer-id or --start-offset.")


def _abort_by_transactional_id(connection: Connection, transactional_id: str) -> None:
    (state,) = _describe(connection, (transactional_id,))
    if state.transaction_state != "Ongoing":
        raise StromError(f"Transaction {transactional_id!r} is {state.transaction_state}, not Ongoing: "
                         "nothing to abort. `strom transactions describe` shows it.")
    producer = connection.producer(**{"transactional.id": transactional_id})
    producer.init_transactions(30)  # the coordinator aborts the open transaction and bumps the epoch
    (after,) = _describe(connection, (transactional_id,))
    click.echo(f"aborted {transactional_id}: now {after.transaction_state}, "
               f"producer epoch {after.producer_epoch}")


def _abort_hanging(connection: Connection, topic: str, partition: int, producer_id: int | None,
                   start_offset: int | None, producer_epoch: int | None,
                   coordinator_epoch: int | None) -> None:
    """Writes an abort marker for the open transaction of a producer on one partition; the producer
    and its epochs come from DescribeProducers unless given."""
    open_ones = [row for row in _producers(connection, topic, (partition,))
                 if row["open transaction start offset"] >= 0]
    found = [row for row in open_ones if row["producer id"] == producer_id
             or row["open transaction start offset"] == start_offset]
    if not found:
        which = f"of producer {producer_id}" if start_offset is None else f"starting at offset {start_offset}"
        raise StromError(f"{topic}-{partition} has no open transaction {which}: nothing to abort. "
                         f"`strom transactions find-hanging --topic {topic}` lists hanging ones.")
    row = found[0]
    marker = WritableTxnMarker(
        producer_id=i64(row["producer id"]),
        producer_epoch=i16(row["producer epoch"] if producer_epoch is None else producer_epoch),
        transaction_result=False,
        topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(i32(partition),)),),
        coordinator_epoch=i32(max(row["coordinator epoch"], 0) if coordinator_epoch is None
                              else coordinator_epoch))
    with _wire(connection, _leader(connection.metadata(), topic, partition)) as client:
        response = client.send(WriteTxnMarkersRequest(markers=(marker,)))
    (result,) = response.markers[0].topics[0].partitions
    _raise_for(result.error_code, f"WriteTxnMarkers({topic}-{partition})", connection, (topic, "Write"))
    click.echo(f"aborted the transaction of producer {row['producer id']} on {topic}-{partition} "
               f"from offset {row['open transaction start offset']}")


def _time(epoch_ms: int) -> str:
    """Epoch milliseconds as an ISO time in UTC (``-`` for none)."""
    if epoch_ms <= 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


_DENIED = {ErrorCode.transactional_id_authorization_failed: "TransactionalId",
           ErrorCode.topic_authorization_failed: "Topic", ErrorCode.cluster_authorization_failed: "Cluster"}


def _raise_for(code: ErrorCode, what: str, connection: Connection | None = None,
               resource: tuple[str, str] = ("", "")) -> None:
    """A broker's error as one line; a missing ACL names the principal, the resource (``resource``: its
    name and the operation asked) and the operation."""
    if code == ErrorCode.none:
        return
    if connection is not None and code in _DENIED:
        name, operation = resource if _DENIED[code] != "Cluster" else ("kafka-cluster", "ClusterAction")
        raise authorization_error(connection.properties, _DENIED[code], name, operation, code.name.upper())
    raise StromError(f"{what} failed with {code.name.upper()}; check the broker log.")
