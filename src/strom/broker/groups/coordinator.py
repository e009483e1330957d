"""The group coordinator: classic-protocol rebalances (eager and cooperative) and committed offsets.

A rebalance starts when a member joins, leaves, changes its subscription or misses its session
timeout. The coordinator then waits until every known member has sent JoinGroup again (or the
rebalance timeout passes, dropping the laggards), bumps the generation, gives the leader the
members' metadata, and hands out the leader's assignment on SyncGroup. Cooperative rebalancing is
driven by the clients over the same requests; the coordinator only has to accept a Stable
group's members rejoining at any time. Dynamic members get their id first (KIP-394); a static
member restarting in a Stable group takes over its old assignment without a rebalance (KIP-345).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.config import BrokerConfig
from strom.broker.groups.group import Group, GroupState, Member
from strom.broker.groups.offsets import CommittedOffset, OffsetStore

log = logging.getLogger(__name__)


class GroupError(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, offsets: OffsetStore) -> None:
        self.config = config
        self.offsets = offsets
        self.groups: dict[str, Group] = {gid: Group(gid) for gid in offsets.offsets}

    # ---- join / sync --------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                   protocol_type: str, protocols: list[tuple[str, bytes]],
                   require_known_member_id: bool = False) -> dict[str, Any]:
        """`require_known_member_id` (JoinGroup v4+, KIP-394): a dynamic member joining without an
        id gets one with MEMBER_ID_REQUIRED and becomes a member when it joins again with it."""
        if not group_id:
            return _join_error(ErrorCode.invalid_group_id, member_id)
        low, high = self.config["group.min.session.timeout.ms"], self.config["group.max.session.timeout.ms"]
        if not low <= session_timeout_ms <= high:
            return _join_error(ErrorCode.invalid_session_timeout, member_id)
        group = self.groups.setdefault(group_id, Group(group_id))
        if not group.supports(protocol_type, protocols) or not protocols:
            return _join_error(ErrorCode.inconsistent_group_protocol, member_id)
        if not member_id and self._is_static_rejoin_keeping_protocol(group, group_instance_id, protocols):
            return self._replace_stable_static_member(group, group_instance_id or "", client_id, client_host,
                                                      session_timeout_ms, rebalance_timeout_ms, protocols)
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member_id and group_instance_id is None:
                group.pending_members.add(member_id)
                asyncio.get_running_loop().call_later(session_timeout_ms / 1000, self._expire_pending, group,
                                                      member_id)
                return _join_error(ErrorCode.member_id_required, member_id)
            if group_instance_id is not None:
                self._retire_static_member(group, group_instance_id, member_id)
        elif member_id not in group.members:
            if member_id not in group.pending_members:
                return _join_error(ErrorCode.unknown_member_id, member_id)
            group.pending_members.discard(member_id)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            group.members[member_id] = member
        else:
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(_join_error(ErrorCode.rebalance_in_progress, member_id))
        member.join_future = asyncio.get_running_loop().create_future()
        self._heard_from(group, member)
        group.protocol_type = protocol_type
        if group.state is GroupState.PREPARING_REBALANCE:
            group.join_changed.set()
        else:
            self._prepare_rebalance(group, f"member {member_id!r} joined")
        return await member.join_future

    @staticmethod
    def _is_static_rejoin_keeping_protocol(group: Group, group_instance_id: str | None,
                                           protocols: list[tuple[str, bytes]]) -> bool:
        """A restarted static member of a Stable group whose protocols leave the group's selected
        protocol as it is: Kafka then skips the rebalance (KIP-345)."""
        if group_instance_id is None or group.state is not GroupState.STABLE:
            return False
        old_id = group.static_member_id(group_instance_id)
        return old_id is not None and group.select_protocol((old_id, protocols)) == group.protocol_name

    def _replace_stable_static_member(self, group: Group, group_instance_id: str, client_id: str,
                                      client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                                      protocols: list[tuple[str, bytes]]) -> dict[str, Any]:
        """KIP-345: the new incarnation takes over the old one's id slot and assignment without a
        rebalance; the old one is fenced."""
        member_id = f"{client_id}-{uuid.uuid4()}"
        old = self._retire_static_member(group, group_instance_id, member_id)
        member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, group.protocol_type or "", protocols,
                        assignment=old.assignment if old else b"")
        group.members[member_id] = member
        self._heard_from(group, member)
        log.info("group %r: static member %r restarted as %r without a rebalance", group.group_id,
                 group_instance_id, member.member_id)
        leader = member.member_id == group.leader_id
        return {"error_code": ErrorCode.none, "generation_id": group.generation,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id, "member_id": member.member_id, "skip_assignment": leader,
                "members": self._members_metadata(group) if leader else []}

    @staticmethod
    def _members_metadata(group: Group) -> list[dict[str, Any]]:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata_for(group.protocol_name or "")} for m in group.members.values()]

    @staticmethod
    def _retire_static_member(group: Group, group_instance_id: str, new_member_id: str) -> Member | None:
        """Fences the old incarnation of a restarted static member (same group.instance.id) and
        hands its leadership to the new member id; returns the old member, if there was one."""
        old_id = group.static_member_id(group_instance_id)
        if old_id is None:
            return None
        old = group.members.pop(old_id)
        _resolve(old.join_future, _join_error(ErrorCode.fenced_instance_id, old_id))
        _resolve(old.sync_future, _sync_result(ErrorCode.fenced_instance_id))
        if group.leader_id == old_id:
            group.leader_id = new_member_id
        return old

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        initial = group.state is GroupState.EMPTY
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                _resolve(member.sync_future, _sync_result(ErrorCode.rebalance_in_progress))
        group.state = GroupState.PREPARING_REBALANCE
        log.info("group %r: preparing rebalance (%s)", group.group_id, reason)
        group.rebalance_task = asyncio.get_running_loop().create_task(self._complete_join(group, initial))

    async def _complete_join(self, group: Group, initial: bool) -> None:
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        deadline = time.monotonic() + timeout_ms / 1000
        if initial:
            delay = min(self.config["group.initial.rebalance.delay.ms"], timeout_ms) / 1000
            await asyncio.sleep(delay)
        while group.pending_members or any(not m.awaiting_join for m in group.members.values()):
            group.join_changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(group.join_changed.wait(), remaining)
            except TimeoutError:
                break
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("group %r: member %r did not rejoin in time", group.group_id, member.member_id)
            del group.members[member.member_id]
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        self._finish_join(group)

    def _finish_join(self, group: Group) -> None:
        group.rebalance_task = None
        if not group.members:
            group.state = GroupState.EMPTY
            group.generation += 1
            group.leader_id = group.protocol_name = None
            return
        group.generation += 1
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        log.info("group %r: generation %d with %d member(s), protocol %r", group.group_id,
                 group.generation, len(group.members), group.protocol_name)
        all_members = self._members_metadata(group)
        for member in group.members.values():
            self._heard_from(group, member)
            _resolve(member.join_future, {
                "error_code": ErrorCode.none, "generation_id": group.generation,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id, "member_id": member.member_id, "skip_assignment": False,
                "members": all_members if member.member_id == group.leader_id else [],
            })

    async def sync(self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes],
                   group_instance_id: str | None = None) -> dict[str, Any]:
        group = self.groups.get(group_id)
        if group is None:
            return _sync_result(ErrorCode.unknown_member_id)
        error = _member_error(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return _sync_result(error)
        member = group.members[member_id]
        if generation != group.generation:
            return _sync_result(ErrorCode.illegal_generation)
        if group.state is GroupState.PREPARING_REBALANCE:
            return _sync_result(ErrorCode.rebalance_in_progress)
        result = {"protocol_type": group.protocol_type, "protocol_name": group.protocol_name}
        if group.state is GroupState.STABLE:
            return {**_sync_result(ErrorCode.none), **result, "assignment": member.assignment}
        member.sync_future = asyncio.get_running_loop().create_future()
        self._heard_from(group, member)
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = GroupState.STABLE
            for m in group.members.values():
                self._heard_from(group, m)
                _resolve(m.sync_future,
                         {**_sync_result(ErrorCode.none), **result, "assignment": m.assignment})
        return await member.sync_future

    # ---- heartbeat / leave / expiry -----------------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  group_instance_id: str | None = None) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = _member_error(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        member = group.members[member_id]
        if generation != group.generation:
            return ErrorCode.illegal_generation
        self._heard_from(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, member_id: str, group_instance_id: str | None = None) -> ErrorCode:
        """A static member may leave by its instance id alone (member id empty, as admin tools send)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group_instance_id is not None and not member_id:
            member_id = group.static_member_id(group_instance_id) or ""
        error = _member_error(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        self._remove_member(group, member_id, "left the group")
        return ErrorCode.none

    def _remove_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id)
        if member.expiry is not None:
            member.expiry.cancel()
        _resolve(member.join_future, _join_error(ErrorCode.unknown_member_id, member_id))
        _resolve(member.sync_future, _sync_result(ErrorCode.unknown_member_id))
        log.info("group %r: member %r %s", group.group_id, member_id, reason)
        if group.state is GroupState.PREPARING_REBALANCE:
            group.join_changed.set()
        elif group.members:
            self._prepare_rebalance(group, f"member {member_id!r} {reason}")
        else:
            group.state = GroupState.EMPTY
            group.generation += 1
            group.leader_id = group.protocol_name = None

    def _heard_from(self, group: Group, member: Member) -> None:
        """A sign of life (join, sync, heartbeat, commit) restarts the member's session: it expires at its
        own deadline, as Kafka's delayed heartbeat does, not at the next pass of a sweep."""
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(member.session_timeout_ms / 1000,
                                                              self._expire, group, member)

    def _expire(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return  # it left, was fenced or dropped from a rebalance meanwhile
        if member.awaiting_join or member.awaiting_sync:  # the rebalance timeout governs it now
            self._heard_from(group, member)
            return
        self._remove_member(group, member.member_id, "missed its session timeout")

    @staticmethod
    def _expire_pending(group: Group, member_id: str) -> None:
        """KIP-394: a member id handed out with MEMBER_ID_REQUIRED lapses if not used within the session."""
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            log.info("group %r: pending member %r did not join again with its id", group.group_id, member_id)
            group.join_changed.set()

    def expire_offsets(self) -> None:
        """Drops offsets of empty groups committed longer than offsets.retention.minutes ago, then
        the empty groups left without offsets (as Kafka's group metadata cleanup does)."""
        deleted = 0
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY:
                continue
            self.offsets.expire(group.group_id, self.config["offsets.retention.minutes"] * 60_000)
            if not self.offsets.offsets.get(group.group_id) and not group.pending_members:
                del self.groups[group.group_id]
                self.offsets.delete_group(group.group_id)
                deleted += 1
        if deleted:
            log.info("deleted %d empty group(s) without committed offsets", deleted)

    # ---- offsets ------------------------------------------------------------------------------
    def check_commit(self, group_id: str, generation: int, member_id: str,
                     group_instance_id: str | None = None, transactional: bool = False) -> ErrorCode:
        """Whether an (Txn)OffsetCommit may store offsets, as Kafka decides: generation -1 without a
        member is a simple commit (admin tools, assign() consumers), allowed while the group has no
        members (and always inside a transaction); anything else must come from a current member."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.EMPTY:
            if generation < 0:
                return ErrorCode.none
            if group is None:
                return ErrorCode.illegal_generation
        if generation >= 0 or member_id or group_instance_id is not None:
            error = _member_error(group, member_id, group_instance_id)
            if error is not ErrorCode.none:
                return error
            if generation != group.generation:
                return ErrorCode.illegal_generation
        elif not transactional:
            return ErrorCode.unknown_member_id  # a simple commit would overwrite the members' progress
        if not transactional and group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if member_id in group.members:
            self._heard_from(group, group.members[member_id])
        return ErrorCode.none

    def commit(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        self.groups.setdefault(group_id, Group(group_id))
        self.offsets.commit(group_id, offsets)

    def delete_offsets(self, group_id: str,
                       keys: list[tuple[str, int]]) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: an empty group loses any of its offsets; a group with members only those of
        topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the others)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, {}
        if group.members and group.protocol_type != "consumer":
            return ErrorCode.non_empty_group, {}
        subscribed = group.subscribed_topics()
        results = {key: ErrorCode.group_subscribed_to_topic if key[0] in subscribed else ErrorCode.none
                   for key in keys}
        self.offsets.delete_offsets(group_id, [k for k, code in results.items() if code is ErrorCode.none])
        return ErrorCode.none, results

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.offsets.offsets.get(group_id, {})

    # ---- admin --------------------------------------------------------------------------------
    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        self.offsets.delete_group(group_id)
        return ErrorCode.none

    def describe(self, group_id: str) -> dict[str, Any]:
        group = self.groups.get(group_id)
        if group is None:
            return {"error_code": ErrorCode.none, "group_id": group_id, "group_state": "Dead",
                    "protocol_type": "", "protocol_data": "", "members": []}
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "member_metadata": m.metadata_for(group.protocol_name or ""),
                    "member_assignment": m.assignment} for m in group.members.values()]
        return {"error_code": ErrorCode.none, "group_id": group_id, "group_state": group.state.value,
                "protocol_type": group.protocol_type or "", "protocol_data": group.protocol_name or "",
                "members": members, "authorized_operations": -2147483648}


def _member_error(group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
    """Kafka's member validation: a static member's instance id must map to this member id."""
    if group_instance_id is not None:
        current = group.static_member_id(group_instance_id)
        if current is None:
            return ErrorCode.unknown_member_id
        return ErrorCode.none if current == member_id else ErrorCode.fenced_instance_id
    return ErrorCode.none if member_id in group.members else ErrorCode.unknown_member_id


def _resolve(future: asyncio.Future | None, result: dict[str, Any]) -> None:
    if future is not None and not future.done():
        future.set_result(result)


def _join_error(code: ErrorCode, member_id: str) -> dict[str, Any]:
    return {"error_code": code, "generation_id": -1, "leader": "",
            "member_id": member_id, "members": []}


def _sync_result(code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "assignment": b""}
