"""`strom groups list|describe|reset-offsets|delete`: consumer groups, their members and lag
(kafka-consumer-groups). A SparkStreams application's group is its application.id; a task
subscription's is its subscription id.

A strom application's stream tasks commit without joining its group, so the running instances are
found in ``<application.id>.instances`` (strom.kafka.instances): `list` and `describe` show the
application as running there, and offsets of a running application are not reset."""

from __future__ import annotations

import datetime
import difflib
import logging
from functools import partial
from typing import Any

import click
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import ConsumerGroupDescription, OffsetSpec

from strom.cli.connection import TIMEOUT, Connection, connection_options
from strom.cli.output import output_option, print_rows
from strom.cli.topics import result
from strom.errors import StromError
from strom.kafka.instances import SESSION_TIMEOUT_MS, application_of, instances_group
from strom.kafka.security import refusal

log = logging.getLogger(__name__)

_INACTIVE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)


@click.group()
def groups() -> None:
    """Consumer groups: members, committed offsets and lag; reset and delete (kafka-consumer-groups)."""


def _state(state: ConsumerGroupState) -> str:
    return state.name.lower() if state is not None else "unknown"


def _type(kind: ConsumerGroupType | None) -> str:
    """``classic`` (JoinGroup/SyncGroup) or ``consumer`` (KIP-848's protocol, group.protocol=consumer). A
    broker that does not say (ListGroups before v5: strom broker, Kafka before 3.7) has classic groups
    only."""
    return "consumer" if kind == ConsumerGroupType.CONSUMER else "classic"


@groups.command("list")
@connection_options
@output_option
def list_command(connection: Connection, output: str) -> None:
    """Every consumer group, its protocol type (classic or consumer) and its state."""
    listed = result(connection.admin().list_consumer_groups(request_timeout=TIMEOUT), "list the groups")
    groups = {g.group_id: g for g in listed.valid}
    applications = [app for app in map(application_of, groups) if app is not None]
    running = {app: members for app, members in _running(connection, applications).items() if members}
    rows = [{"group": name, "type": _type(groups[name].type) if name in groups else "classic",
             "state": _running_state(running[name]) if name in running else _state(groups[name].state)}
            for name in sorted(set(groups) - {instances_group(app) for app in applications} | set(running))]
    print_rows(rows, ["group", "type", "state"], output)


def _running_state(instances: list[Any]) -> str:
    return f"running (strom application, {len(instances)} instance(s))"


def _running(connection: Connection, applications: list[str]) -> dict[str, list[Any]]:
    """The members of each application's instances group: its running drivers."""
    if not applications:
        return {}
    futures = connection.admin().describe_consumer_groups([instances_group(app) for app in applications],
                                                          request_timeout=TIMEOUT)
    return {app: _instances(futures[instances_group(app)], instances_group(app)) for app in applications}


def _instances(future: Any, group: str) -> list[Any]:
    """The group's members; none when this principal may not describe it (as docs/deploy.md says, without that
    ACL the application runs, but the CLI cannot see it running), said at -v."""
    try:
        return future.result(TIMEOUT).members
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
            raise StromError(f"Could not describe group {group!r}: {exc.args[0].str()}") from exc
        log.info("Cannot tell whether the application of group %s runs: this principal may not describe "
                 "that group.", group)
        return []


def refuse_if_running(connection: Connection, application: str, action: str) -> None:
    """Raises when a strom application of this id runs anywhere (its drivers' group has members)."""
    instances = _running(connection, [application])[application]
    if instances:
        drivers = "; ".join(sorted(m.client_id for m in instances))
        raise StromError(f"Application {application} is running: {len(instances)} instance(s) ({drivers}). "
                         f"Stop every instance (Ctrl-C or SIGTERM to `strom run`), then {action}; a killed "
                         f"driver stays listed for {SESSION_TIMEOUT_MS // 1000} s.")


def _describe(connection: Connection, group: str) -> ConsumerGroupDescription:
    return result(connection.admin().describe_consumer_groups([group], request_timeout=TIMEOUT)[group],
                  f"describe group {group!r}",
                  partial(refusal, connection.properties, group=group, group_operation="Describe"))


def committed(connection: Connection, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (partitions it never committed are absent)."""
    request = [ConsumerGroupTopicPartitions(group)]
    found = result(connection.admin().list_consumer_group_offsets(request, request_timeout=TIMEOUT)[group],
                   f"read the committed offsets of {group!r}",
                   partial(refusal, connection.properties, group=group, group_operation="Describe"))
    return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions if tp.offset >= 0}


def list_offsets(connection: Connection, partitions: list[tuple[str, int]], spec: OffsetSpec) -> dict:
    """Offsets of ``spec`` (earliest, latest or for a timestamp) per partition, read_committed."""
    if not partitions:
        return {}
    futures = connection.admin().list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                              isolation_level=IsolationLevel.READ_COMMITTED,
                                              request_timeout=TIMEOUT)
    return {(tp.topic, tp.partition): result(f, f"list the offsets of {tp.topic}-{tp.partition}").offset
            for tp, f in futures.items()}


def _existing(connection: Connection, group: str, instances: list[Any] | None = None
              ) -> tuple[ConsumerGroupDescription, dict]:
    """The group's description and committed offsets; a group with neither (and no running strom
    application of its name) is an error."""
    description, offsets = _describe(connection, group), committed(connection, group)
    if description.state in _INACTIVE and not description.members and not offsets and not instances:
        listed = result(connection.admin().list_consumer_groups(request_timeout=TIMEOUT), "list the groups")
        names = [g.group_id for g in listed.valid]
        if group in names:  # it exists, with no member yet (joining) and nothing committed
            return description, offsets
        hint = difflib.get_close_matches(group, names, n=1)
        suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
        raise StromError(f"Consumer group {group!r} does not exist (no members, no committed offsets)."
                         f"{suggestion} See `strom groups list`.")
    return description, offsets


def _partitions(assignment: Any) -> list[str]:
    return sorted(f"{tp.topic}-{tp.partition}" for tp in (assignment.topic_partitions if assignment else []))


def _members(description: ConsumerGroupDescription, instances: list[Any], output: str) -> None:
    """One row per member with its assignment; a consumer-protocol group also shows the target
    assignment the coordinator is moving the member to (kafka-consumer-groups --members --verbose).
    A running strom application's rows are its instances (drivers), which assign themselves nothing."""
    if instances:
        rows = [{"member": m.member_id, "host": m.host, "client id": m.client_id}
                for m in sorted(instances, key=lambda m: m.member_id)]
        print_rows(rows, ["member", "host", "client id"], output)
        return
    rows = [{"member": m.member_id, "group instance id": m.group_instance_id, "host": m.host,
             "client id": m.client_id, "partitions": len(m.assignment.topic_partitions),
             "assignment": _partitions(m.assignment), "target assignment": _partitions(m.target_assignment)}
            for m in sorted(description.members, key=lambda m: m.member_id)]
    columns = ["member", "host", "client id", "partitions", "assignment"]
    if description.type == ConsumerGroupType.CONSUMER:
        columns.append("target assignment")
    print_rows(rows, columns, output)


@groups.command("describe")
@connection_options
@click.argument("group")
@click.option("--members", is_flag=True, help="One row per member and its assigned partitions instead.")
@output_option
def describe_command(connection: Connection, group: str, members: bool, output: str) -> None:
    """Per partition: committed offset, end offset, lag and the member it is assigned to. The first line
    (on stderr) gives the group's type, state, assignor and member count, and for a running strom
    application its instances (--members lists them)."""
    instances = _running(connection, [group])[group]
    description, offsets = _existing(connection, group, instances)
    if output != "json":
        assignor = description.partition_assignor or "-"
        running = (f"{_running_state(instances)} in group {instances_group(group)}; its stream tasks commit "
                   "without joining this group: " if instances else "")
        click.echo(f"group {group}: {running}{_type(description.type)} protocol, "
                   f"{_state(description.state)}, assignor {assignor}, "
                   f"coordinator {description.coordinator.id}, {len(description.members)} member(s)",
                   err=True)
    if members:
        _members(description, instances, output)
        return
    owners: dict[tuple[str, int], Any] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions:
            owners[(tp.topic, tp.partition)] = member
    partitions = sorted(set(offsets) | set(owners))
    ends = list_offsets(connection, partitions, OffsetSpec.latest())
    rows = []
    for key in partitions:
        member, offset, end = owners.get(key), offsets.get(key), ends[key]
        rows.append({"group": group, "state": _state(description.state), "topic": key[0], "partition": key[1],
                     "committed offset": offset, "end offset": end,
                     "lag": None if offset is None else max(0, end - offset),
                     "member": member.member_id if member else None, "host": member.host if member else None,
                     "client id": member.client_id if member else None})
    print_rows(rows, ["topic", "partition", "committed offset", "end offset", "lag", "member", "host",
                      "client id"], output)


def timestamp_ms(text: str) -> int:
    """``--to-datetime`` of `groups reset-offsets` and `streams reset` in epoch ms: ISO 8601, without a
    zone in local time (as kafka-consumer-groups and kafka-streams-application-reset read it)."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO date-time, e.g. 2026-11-25T14:00:00 (local time), "
                                 "2026-11-25T14:00:00Z or 2026-11-25T14:00:00+01:00",
                                 param_hint="--to-datetime") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


@groups.command("reset-offsets")
@connection_options
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, help="Topic whose offsets move; repeatable.")
@click.option("--to-earliest", is_flag=True, help="To each partition's log start offset.")
@click.option("--to-latest", is_flag=True, help="To each partition's end (skip everything unread).")
@click.option("--to-offset", type=click.IntRange(min=0), default=None,
              help="To this offset (kept within the log).")
@click.option("--to-datetime", default=None,
              help="To the first record at or after this ISO date-time (no zone: local time).")
@click.option("--shift-by", type=int, default=None, help="By N from the committed offset (negative: back).")
@click.option("--dry-run", is_flag=True, help="Show the new offsets without committing them.")
@output_option
def reset_offsets_command(connection: Connection, group: str, topics: tuple[str, ...], to_earliest: bool,
                          to_latest: bool, to_offset: int | None, to_datetime: str | None,
                          shift_by: int | None, dry_run: bool, output: str) -> None:
    """Move the committed offsets of an inactive group (its consumers stopped)."""
    chosen = [name for name, given in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                       ("--to-offset", to_offset is not None),
                                       ("--to-datetime", to_datetime is not None),
                                       ("--shift-by", shift_by is not None)) if given]
    if len(chosen) != 1:
        raise click.UsageError("Give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                               "--shift-by.")
    refuse_if_running(connection, group, "reset its offsets")
    description = _describe(connection, group)
    if description.state not in _INACTIVE or description.members:
        raise StromError(f"Group {group!r} is {_state(description.state)} with {len(description.members)} "
                         "member(s); stop its consumers first (offsets of an active group cannot be reset).")
    partitions = [(t, p) for t in topics for p in sorted(connection.topic(t, needs="Read").partitions)]
    old = committed(connection, group)
    low = list_offsets(connection, partitions, OffsetSpec.earliest())
    high = list_offsets(connection, partitions, OffsetSpec.latest())
    if to_datetime is not None:
        found = list_offsets(connection, partitions, OffsetSpec.for_timestamp(timestamp_ms(to_datetime)))
        target = {k: found[k] if found[k] >= 0 else high[k] for k in partitions}
    elif shift_by is not None:
        target = {k: old.get(k, low[k]) + shift_by for k in partitions}
    else:
        target = {k: low[k] if to_earliest else high[k] if to_latest else to_offset for k in partitions}
    new = {k: min(max(target[k], low[k]), high[k]) for k in partitions}
    if not dry_run:
        _commit(connection, group, [TopicPartition(t, p, new[(t, p)]) for t, p in partitions])
    rows = [{"topic": t, "partition": p, "old offset": old.get((t, p)), "new offset": new[(t, p)]}
            for t, p in partitions]
    print_rows(rows, ["topic", "partition", "old offset", "new offset"], output)
    click.echo(f"{'dry run: nothing committed' if dry_run else 'committed'} for group {group}", err=True)


def _commit(connection: Connection, group: str, offsets: list[TopicPartition]) -> None:
    """Commits ``offsets`` for ``group``; a partition's failure (a refusal comes in the result, not as
    the future's exception) is raised, naming a missing ACL."""
    request = [ConsumerGroupTopicPartitions(group, offsets)]
    altered = result(connection.admin().alter_consumer_group_offsets(request, request_timeout=TIMEOUT)[group],
                     f"commit the new offsets of {group!r}",
                     partial(refusal, connection.properties, group=group))
    for tp in altered.topic_partitions:
        if tp.error is not None:
            raise refusal(connection.properties, tp.error, group=group, topic=tp.topic) or StromError(
                f"Could not commit the new offset of {tp.topic}-{tp.partition} for group {group!r}: "
                f"{tp.error.str()}")


@groups.command("delete")
@connection_options
@click.argument("names", nargs=-1, required=True)
def delete_command(connection: Connection, names: tuple[str, ...]) -> None:
    """Delete inactive groups and their committed offsets."""
    for name in names:
        refuse_if_running(connection, name, "delete its group")
        _existing(connection, name)
    futures = connection.admin().delete_consumer_groups(list(names), request_timeout=TIMEOUT)
    for name, future in futures.items():
        result(future, f"delete group {name!r} (stop its consumers first)",
               partial(refusal, connection.properties, group=name, group_operation="Delete"))
        click.echo(f"deleted {name}")
