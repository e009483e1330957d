"""The group coordinator on its own (asyncio, real logs on disk): joins, syncs, session and rebalance
timeouts, generation checks, static members and committed offsets across a reload."""

from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from strom.broker.config import BrokerConfig
from strom.broker.groups.coordinator import GroupCoordinator
from strom.broker.groups.group import GroupState
from strom.broker.groups.offsets import CommittedOffset, OffsetStore
from strom.broker.log.manager import LogManager

CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10}
PROTOCOLS = [("range", b"meta")]


def _open(path) -> tuple[GroupCoordinator, LogManager]:
    config = BrokerConfig(CONFIG)
    logs = LogManager(path, config)
    return GroupCoordinator(config, OffsetStore(logs)), logs


def _coordinator(path) -> GroupCoordinator:
    return _open(path)[0]


async def _join(coordinator, member_id="", session_ms=400, rebalance_ms=400, instance=None):
    return await coordinator.join("g", member_id, instance, "client", "127.0.0.1", session_ms, rebalance_ms,
                                  "consumer", PROTOCOLS)


def test_join_sync_and_assignment(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        first, second = await asyncio.gather(_join(coordinator), _join(coordinator))
        assert first["generation_id"] == second["generation_id"] == 1
        leader, follower = (first, second) if first["members"] else (second, first)
        assert {m["member_id"] for m in leader["members"]} == {first["member_id"], second["member_id"]}
        assert follower["members"] == []
        assignments = {leader["member_id"]: b"to-leader", follower["member_id"]: b"to-follower"}
        synced = await asyncio.gather(
            coordinator.sync("g", 1, follower["member_id"], {}),
            coordinator.sync("g", 1, leader["member_id"], assignments))
        assert [s["assignment"] for s in synced] == [b"to-follower", b"to-leader"]
        assert coordinator.groups["g"].state is GroupState.STABLE
        assert coordinator.heartbeat("g", 1, leader["member_id"]) is ErrorCode.none
        assert coordinator.heartbeat("g", 0, leader["member_id"]) is ErrorCode.illegal_generation
        assert coordinator.heartbeat("g", 1, "stranger") is ErrorCode.unknown_member_id
        assert coordinator.check_commit("g", 0, leader["member_id"]) is ErrorCode.illegal_generation
        # a simple commit (generation -1, no member) must not overwrite the members' progress
        assert coordinator.check_commit("g", -1, "") is ErrorCode.unknown_member_id
        assert coordinator.check_commit("g", -1, "", transactional=True) is ErrorCode.none
        assert coordinator.check_commit("g", 1, leader["member_id"]) is ErrorCode.none

    asyncio.run(scenario())


def test_missed_session_timeout_rebalances_without_the_member(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        alive, silent = await asyncio.gather(_join(coordinator), _join(coordinator))
        leader = alive if alive["members"] else silent
        await asyncio.gather(*[coordinator.sync("g", 1, m["member_id"], {}) for m in (alive, silent)
                               if m is not leader], coordinator.sync("g", 1, leader["member_id"], {}))
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:  # only `alive` heartbeats
            coordinator.heartbeat("g", 1, alive["member_id"])
            await asyncio.sleep(0.05)
        group = coordinator.groups["g"]
        assert silent["member_id"] not in group.members
        assert coordinator.heartbeat("g", 1, alive["member_id"]) is ErrorCode.rebalance_in_progress
        rejoined = await _join(coordinator, alive["member_id"])
        assert rejoined["generation_id"] == 2 and [m["member_id"] for m in rejoined["members"]] == [
            alive["member_id"]]

    asyncio.run(scenario())


def test_a_static_members_session_ends_at_its_own_deadline(tmp_path):
    """As librdkafka's 0081 needs: a static member (which does not leave on close) gone from its group
    when its session timeout passes, so the group can be deleted then, not up to a sweep later."""
    async def scenario():
        coordinator = _coordinator(tmp_path)
        joined = await _join(coordinator, session_ms=300, instance="static-1")
        await coordinator.sync("g", 1, joined["member_id"], {})
        await asyncio.sleep(0.2)
        assert coordinator.heartbeat("g", 1, joined["member_id"]) is ErrorCode.none  # the session restarts
        heard = time.monotonic()
        while coordinator.groups["g"].members and time.monotonic() - heard < 2:
            await asyncio.sleep(0.005)
        ended = time.monotonic() - heard
        assert 0.29 <= ended <= 0.45, ended  # not a 0.5 s sweep's pass later
        assert coordinator.groups["g"].state is GroupState.EMPTY

    asyncio.run(scenario())


def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        a, b = await asyncio.gather(_join(coordinator, session_ms=10_000, rebalance_ms=300),
                                    _join(coordinator, session_ms=10_000, rebalance_ms=300))
        newcomer = asyncio.create_task(_join(coordinator, session_ms=10_000, rebalance_ms=300))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        rejoined_a = await _join(coordinator, a["member_id"], session_ms=10_000, rebalance_ms=300)
        joined = await newcomer
        assert time.monotonic() - started >= 0.2, "the coordinator waited for b to rejoin"
        assert rejoined_a["generation_id"] == joined["generation_id"] == 2
        assert b["member_id"] not in coordinator.groups["g"].members

    asyncio.run(scenario())


def test_static_member_restart_replaces_its_old_incarnation(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        old = await _join(coordinator, instance="instance-1", session_ms=10_000)
        await coordinator.sync("g", 1, old["member_id"], {old["member_id"]: b"x"})
        new = await _join(coordinator, instance="instance-1", session_ms=10_000)
        assert list(coordinator.groups["g"].members) == [new["member_id"]]
        stale = coordinator.heartbeat("g", new["generation_id"], old["member_id"])
        assert stale is ErrorCode.unknown_member_id
        generation = new["generation_id"]
        fenced = coordinator.heartbeat("g", generation, old["member_id"], "instance-1")
        assert fenced is ErrorCode.fenced_instance_id
        assert coordinator.check_commit("g", generation, old["member_id"], "instance-1") is (
            ErrorCode.fenced_instance_id)
        assert coordinator.leave("g", old["member_id"], "instance-1") is ErrorCode.fenced_instance_id
        assert coordinator.leave("g", "", "instance-1") is ErrorCode.none  # by instance id alone
        assert coordinator.groups["g"].members == {}

    asyncio.run(scenario())


def test_static_member_restart_in_a_stable_group_keeps_its_assignment_without_a_rebalance(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        first, other = await asyncio.gather(_join(coordinator, instance="a", session_ms=10_000),
                                            _join(coordinator, instance="b", session_ms=10_000))
        leader, follower = (first, other) if first["members"] else (other, first)
        assignments = {first["member_id"]: b"to-a", other["member_id"]: b"to-b"}
        await asyncio.gather(coordinator.sync("g", 1, follower["member_id"], {}),
                             coordinator.sync("g", 1, leader["member_id"], assignments))
        restarted = await _join(coordinator, instance="a", session_ms=10_000)
        assert restarted["error_code"] is ErrorCode.none and restarted["generation_id"] == 1
        assert coordinator.groups["g"].state is GroupState.STABLE, "no rebalance"
        assert coordinator.groups["g"].leader_id in coordinator.groups["g"].members, "leadership moved"
        synced = await coordinator.sync("g", 1, restarted["member_id"], {})
        assert synced["assignment"] == b"to-a"
        assert coordinator.heartbeat("g", 1, first["member_id"], "a") is ErrorCode.fenced_instance_id
        assert coordinator.heartbeat("g", 1, other["member_id"], "b") is ErrorCode.none
        resubscribed = await coordinator.join("g", "", "b", "client", "127.0.0.1", 10_000, 400, "consumer",
                                              [("range", b"other-topics")])
        assert resubscribed["generation_id"] == 1, "new metadata, same selected protocol: no rebalance"

    asyncio.run(scenario())


def test_static_member_restart_that_changes_the_selected_protocol_rebalances(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        both = [("range", b""), ("roundrobin", b"")]

        def join(instance, protocols):
            return coordinator.join("g", "", instance, "client", "127.0.0.1", 10_000, 300, "consumer",
                                    protocols)
        first, other = await asyncio.gather(join("a", both), join("b", both))
        leader, follower = (first, other) if first["members"] else (other, first)
        await asyncio.gather(coordinator.sync("g", 1, follower["member_id"], {}),
                             coordinator.sync("g", 1, leader["member_id"], {}))
        assert coordinator.groups["g"].protocol_name == "range"
        leader_instance = "a" if leader is first else "b"
        restarted = await join(leader_instance, list(reversed(both)))  # now prefers roundrobin
        assert restarted["generation_id"] == 2 and restarted["protocol_name"] == "roundrobin"

    asyncio.run(scenario())


def test_committed_offsets_are_replayed_from_the_log(tmp_path):
    coordinator, logs = _open(tmp_path)
    coordinator.commit("g", {("t", 0): CommittedOffset(5, -1, "m", int(time.time() * 1000)),
                             ("t", 1): CommittedOffset(9, -1, "", int(time.time() * 1000))})
    coordinator.commit("g", {("t", 0): CommittedOffset(7, -1, "", int(time.time() * 1000))})
    coordinator.offsets.delete_offsets("g", [("t", 1)])
    logs.close()
    reloaded, logs = _open(tmp_path)
    assert {k: v.offset for k, v in reloaded.committed("g").items()} == {("t", 0): 7}
    reloaded.commit("h", {("gone", 0): CommittedOffset(3, -1, "", int(time.time() * 1000))})
    reloaded.offsets.delete_topic("gone")
    assert reloaded.committed("h") == {}
    assert reloaded.delete_group("g") is ErrorCode.none
    logs.close()
    assert _coordinator(tmp_path).committed("g") == {}


def test_offsets_of_empty_groups_expire(tmp_path):
    config = BrokerConfig({**CONFIG, "offsets.retention.minutes": 1})
    coordinator = GroupCoordinator(config, OffsetStore(LogManager(tmp_path, config)))
    old = int(time.time() * 1000) - 120_000
    coordinator.commit("idle", {("t", 0): CommittedOffset(1, -1, "", old)})
    coordinator.commit("recent", {("t", 0): CommittedOffset(1, -1, "", int(time.time() * 1000))})
    coordinator.expire_offsets()
    assert coordinator.committed("idle") == {}
    assert coordinator.committed("recent") != {}


def test_join_without_member_id_gets_one_first_kip_394(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        join = coordinator.join
        args = ("client", "127.0.0.1", 400, 400, "consumer", PROTOCOLS)
        first = await join("g", "", None, *args, require_known_member_id=True)
        assert first["error_code"] is ErrorCode.member_id_required and first["member_id"]
        assert coordinator.groups["g"].members == {}
        second = await join("g", "", None, *args, require_known_member_id=True)
        joined = await asyncio.gather(join("g", first["member_id"], None, *args),
                                      join("g", second["member_id"], None, *args))
        assert [j["error_code"] for j in joined] == [ErrorCode.none, ErrorCode.none]
        assert joined[0]["generation_id"] == joined[1]["generation_id"] == 1, "one rebalance for both"
        unknown = await join("g", "never-handed-out", None, *args)
        assert unknown["error_code"] is ErrorCode.unknown_member_id
        static = await join("h", "", "instance-1", *args, require_known_member_id=True)
        assert static["error_code"] is ErrorCode.none  # static members skip the handshake

    asyncio.run(scenario())


def test_pending_member_that_never_joins_again_expires(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        pending = await coordinator.join("g", "", None, "client", "127.0.0.1", 100, 100, "consumer",
                                         PROTOCOLS, require_known_member_id=True)
        await asyncio.sleep(0.15)
        late = await _join(coordinator, pending["member_id"])
        assert late["error_code"] is ErrorCode.unknown_member_id

    asyncio.run(scenario())


def test_offset_commit_validation_follows_kafka(tmp_path):
    async def scenario():
        coordinator = _coordinator(tmp_path)
        assert coordinator.check_commit("simple", -1, "") is ErrorCode.none  # no such group yet
        assert coordinator.check_commit("simple", 3, "m") is ErrorCode.illegal_generation
        member = await _join(coordinator)
        assert coordinator.check_commit("g", 1, member["member_id"]) is ErrorCode.rebalance_in_progress
        await coordinator.sync("g", 1, member["member_id"], {})
        assert coordinator.check_commit("g", 1, member["member_id"]) is ErrorCode.none
        assert coordinator.check_commit("g", 0, member["member_id"]) is ErrorCode.illegal_generation
        assert coordinator.check_commit("g", 1, "stranger") is ErrorCode.unknown_member_id
        assert coordinator.check_commit("g", -1, "") is ErrorCode.unknown_member_id
        assert coordinator.leave("g", member["member_id"]) is ErrorCode.none
        assert coordinator.check_commit("g", -1, "") is ErrorCode.none  # empty again: simple commits

    asyncio.run(scenario())


def test_empty_groups_without_offsets_are_deleted_by_the_offsets_expiry_pass(tmp_path):
    async def scenario():
        config = BrokerConfig({**CONFIG, "offsets.retention.minutes": 1})
        coordinator = GroupCoordinator(config, OffsetStore(LogManager(tmp_path, config)))
        for i in range(500):
            joined = await coordinator.join(f"g{i}", "", None, "c", "h", 400, 400, "consumer", PROTOCOLS)
            assert coordinator.leave(f"g{i}", joined["member_id"]) is ErrorCode.none
        now = int(time.time() * 1000)
        coordinator.commit("kept", {("t", 0): CommittedOffset(1, -1, "", now)})
        coordinator.commit("expired", {("t", 0): CommittedOffset(1, -1, "", now - 120_000)})
        busy = await _join(coordinator)
        assert len(coordinator.groups) == 503
        coordinator.expire_offsets()
        assert set(coordinator.groups) == {"kept", "g"}, "empty groups without offsets are gone"
        assert coordinator.describe("g0")["group_state"] == "Dead"
        assert coordinator.heartbeat("g", busy["generation_id"], busy["member_id"]) is ErrorCode.none

    asyncio.run(scenario())
