"""State of one consumer group under the classic protocol (members, generation, assignments)."""

from __future__ import annotations

import asyncio
import enum
import struct
from dataclasses import dataclass, field

from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_reader


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    expiry: asyncio.TimerHandle | None = None
    """Fires when the session times out; every sign of life replaces it (Kafka's delayed heartbeat)."""

    def metadata_for(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)  # KIP-394: ids handed out, not joined with yet
    join_changed: asyncio.Event = field(default_factory=asyncio.Event)
    rebalance_task: asyncio.Task | None = None

    def static_member_id(self, group_instance_id: str) -> str | None:
        return next((m.member_id for m in self.members.values()
                     if m.group_instance_id == group_instance_id), None)

    def subscribed_topics(self) -> set[str]:
        """Topics the members subscribe to ("consumer" protocol type only; unreadable metadata
        counts as no topic, as Kafka does)."""
        if self.protocol_type != "consumer":
            return set()
        topics: set[str] = set()
        for member in self.members.values():
            topics |= _subscription_topics(member.metadata_for(self.protocol_name or ""))
        return topics

    def select_protocol(self, replaced: tuple[str, list[tuple[str, bytes]]] | None = None) -> str | None:
        """The first protocol, in the leader's order of preference, that every member supports;
        `replaced` (member id, protocols) asks what it would be if that member's protocols changed."""
        if not self.members:
            return None
        offered = {m.member_id: m.protocols for m in self.members.values()}
        if replaced is not None:
            offered[replaced[0]] = replaced[1]
        leader = self.leader_id if self.leader_id in offered else next(iter(offered))
        supported = [{name for name, _ in protocols} for protocols in offered.values()]
        for name, _ in offered[leader]:
            if all(name in names for names in supported):
                return name
        return None

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a joining member fits the group's protocol type and shares a protocol."""
        if not self.members:
            return True
        if self.protocol_type is not None and protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in self.members.values())


def _subscription_topics(metadata: bytes) -> set[str]:
    """The topics of a ConsumerProtocolSubscription (any version: later ones only append fields)."""
    if len(metadata) < 2:
        return set()
    version = min(_VERSION.unpack_from(metadata)[0], len(_SUBSCRIPTIONS) - 1)
    try:
        subscription, _ = entity_reader(_SUBSCRIPTIONS[max(version, 0)])(metadata, 2)
    except Exception:  # kio raises many kinds of errors on garbage
        return set()
    return set(subscription.topics)


_VERSION = struct.Struct(">h")
_SUBSCRIPTIONS = [subscription_v0.ConsumerProtocolSubscription, subscription_v1.ConsumerProtocolSubscription,
                  subscription_v2.ConsumerProtocolSubscription, subscription_v3.ConsumerProtocolSubscription]
