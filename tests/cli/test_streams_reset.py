"""`strom streams reset` against the real broker: input offsets moved, internal topics deleted (their
offsets back to 0), local state removed; --dry-run changes nothing; --to-datetime picks by time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid

import pytest
from click.testing import CliRunner
from confluent_kafka import TopicPartition

from strom.cli.main import cli
from strom.kafka import clients, offsets
from strom.kafka.instances import ApplicationInstance
from support.processes import STROM

pytestmark = pytest.mark.broker
BASE_MS = 1_700_000_000_000


def _setup(broker, tmp_path):
    bootstrap = broker.bootstrap_servers
    app_id = f"reset-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-in"  # an input topic that only looks internal by prefix: not deleted
    changelog, repartition = f"{app_id}-store-changelog", f"{app_id}-x-repartition"
    clients.create_topics(bootstrap, {source: 2, changelog: 1, repartition: 1})
    producer = clients.producer(bootstrap)
    for i in range(10):
        producer.produce(source, b"v", partition=i % 2, timestamp=BASE_MS + i * 1000)
        producer.produce(repartition, b"r")
    assert producer.flush(30) == 0
    admin = clients.admin(bootstrap)
    offsets.reset(admin, app_id, {(source, 0): 5, (source, 1): 5, (repartition, 0): 10})
    (tmp_path / app_id / "0_0").mkdir(parents=True)
    return bootstrap, app_id, source, changelog, repartition, admin


def _invoke(*args: str):
    result = CliRunner().invoke(cli, ["streams", "reset", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_reset_moves_input_offsets_deletes_internal_topics_and_state(broker, tmp_path):
    bootstrap, app_id, source, changelog, repartition, admin = _setup(broker, tmp_path)
    common = [app_id, "--bootstrap-servers", bootstrap, "--input-topics", source,
              "--state-dir", str(tmp_path)]

    planned = _invoke(*common, "--dry-run")
    assert f"delete internal topic {changelog}" in planned
    assert f"delete internal topic {repartition}" in planned
    assert offsets.committed(admin, app_id, [(source, 0), (source, 1)]) == {(source, 0): 5, (source, 1): 5}
    assert (tmp_path / app_id).exists()

    _invoke(*common)
    assert offsets.committed(admin, app_id, [(source, 0), (source, 1)]) == {(source, 0): 0, (source, 1): 0}
    assert offsets.committed(admin, app_id, [(repartition, 0)]) in ({}, {(repartition, 0): 0})
    topics = admin.list_topics(timeout=30).topics
    assert source in topics and changelog not in topics and repartition not in topics
    assert not (tmp_path / app_id).exists()


def test_reset_to_a_datetime_picks_the_first_record_at_or_after_it(broker, tmp_path):
    bootstrap, app_id, source, *_rest, admin = _setup(broker, tmp_path)
    # records i = 0..9 at BASE_MS + i s, alternating partitions: 0,2,4,6,8 on 0 and 1,3,5,7,9 on 1
    _invoke(app_id, "--bootstrap-servers", bootstrap, "--input-topics", source, "--state-dir", str(tmp_path),
            "--to-datetime", "2023-11-14T22:13:24Z")  # BASE_MS + 4 s
    assert offsets.committed(admin, app_id, [(source, 0), (source, 1)]) == {(source, 0): 2, (source, 1): 2}
    # a time after every record: the end
    _invoke(app_id, "--bootstrap-servers", bootstrap, "--input-topics", source, "--state-dir", str(tmp_path),
            "--to-datetime", "2030-01-01T00:00:00+00:00")
    assert offsets.committed(admin, app_id, [(source, 0), (source, 1)]) == {(source, 0): 5, (source, 1): 5}


def test_reset_refuses_a_missing_input_topic_and_a_bad_time(broker):
    runner = CliRunner()
    missing = runner.invoke(cli, ["streams", "reset", "x", "--bootstrap-servers", broker.bootstrap_servers,
                                  "--input-topics", "no-such-topic"])
    assert missing.exit_code != 0 and "do not exist" in str(missing.exception)
    bad = runner.invoke(cli, ["streams", "reset", "x", "--bootstrap-servers", broker.bootstrap_servers,
                              "--to-datetime", "yesterday"])
    assert bad.exit_code == 2 and "'yesterday' is not an ISO date-time" in bad.output


def test_without_input_topics_the_groups_committed_inputs_are_reset(broker, tmp_path):
    bootstrap, app_id, source, *_internal, admin = _setup(broker, tmp_path)
    output = _invoke(app_id, "--bootstrap-servers", bootstrap, "--state-dir", str(tmp_path))
    assert f"input topics (the group's committed offsets): {source}\n" in output
    assert offsets.committed(admin, app_id, [(source, 0), (source, 1)]) == {(source, 0): 0, (source, 1): 0}


def test_an_unknown_application_is_an_error_not_a_success(broker, tmp_path):
    result = CliRunner().invoke(cli, ["streams", "reset", f"nobody-{uuid.uuid4().hex[:8]}",
                                      "--bootstrap-servers", broker.bootstrap_servers, "--state-dir",
                                      str(tmp_path)])
    assert result.exit_code != 0 and "No application 'nobody-" in str(result.exception)
    assert "reset:" not in result.output


def test_committed_and_lag_of_a_group(broker):
    bootstrap = broker.bootstrap_servers
    topic, group = f"lag-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {topic: 2})
    producer = clients.producer(bootstrap)
    for i in range(6):
        producer.produce(topic, b"v", partition=i % 2)
    assert producer.flush(30) == 0
    consumer = clients.consumer(bootstrap, group)
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    found = offsets.group_offsets(clients.admin(bootstrap), group, [(topic, 0), (topic, 1)])
    assert found[(topic, 0)].committed == 1 and found[(topic, 0)].lag == 2
    assert found[(topic, 1)].committed is None and found[(topic, 1)].lag == 3


def test_reset_takes_the_connection_options_of_every_broker_facing_command(strom, tmp_path):
    """-b, -X and --command-config as `strom topics` takes them: settings the plaintext broker accepts
    work; a SASL login it does not offer on that listener, or a TLS client, is refused by it, so the settings
    reach the client."""
    config = tmp_path / "client.properties"
    config.write_text(f"bootstrap.servers={strom.bootstrap}\nsecurity.protocol=PLAINTEXT\n")
    state = ["--state-dir", str(tmp_path), "--dry-run"]
    (tmp_path / "app").mkdir()  # an application with local state, so known
    assert "delete local state" in strom.ok("streams", "reset", "app", "--command-config", str(config),
                                            *state).out.decode()
    assert "delete local state" in strom.ok("streams", "reset", "app", "-b", strom.bootstrap,
                                            "-X", "client.id=reset-tool", *state).out.decode()
    sasl = strom.fails("streams", "reset", "app", "--command-config", str(config), "-X",
                       "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN", "-X",
                       "sasl.username=alice", "-X", "sasl.password=secret", *state)
    assert "Cannot log in" in sasl and "User:alice with PLAIN" in sasl and "secret" not in sasl
    tls = strom.fails("streams", "reset", "app", "-X", "security.protocol=SSL", *state)
    assert "No broker reachable" in tls and "SSL" in tls


@pytest.mark.slow
def test_reset_on_the_apache_kafka_cluster(kafka_cluster, tmp_path):
    """The same reset against 3 Kafka nodes: the group's coordinator, the topics' leaders and the
    controller that deletes topics are different brokers."""
    test_reset_moves_input_offsets_deletes_internal_topics_and_state(kafka_cluster, tmp_path)


def _strom(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([STROM, *args, "--bootstrap-servers", bootstrap], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow  # eight `strom` subprocesses
def test_a_running_application_is_listed_as_running_and_not_reset_from_any_machine(broker, tmp_path):
    """A running application's driver is a member of ``<app>.instances`` (what SparkStreams.start()
    joins; test_run.py's long-running test sees it from `strom run`): `groups list|describe` show it
    running, and reset is refused even where its state directory is not (another machine)."""
    bootstrap, app_id, source, *_, admin = _setup(broker, tmp_path)
    instance = ApplicationInstance(bootstrap, app_id, source, "stream threads on Spark local[2]")
    try:
        deadline = time.monotonic() + 60
        while (listed := json.loads(_strom(bootstrap, "groups", "list", "--output", "json").stdout)) and \
                {"group": app_id, "type": "classic", "state": "running (strom application, 1 instance(s))"} \
                not in listed:
            assert time.monotonic() < deadline, listed
            time.sleep(0.5)
        assert not [row for row in listed if row["group"] == f"{app_id}.instances"]  # folded into its row
        described = _strom(bootstrap, "groups", "describe", app_id)
        assert described.returncode == 0 and "running (strom application, 1 instance(s))" in described.stderr
        assert f"{source}\t0\t5" in described.stdout  # the offsets table as before
        members = _strom(bootstrap, "groups", "describe", app_id, "--members", "--output", "json")
        (member,) = json.loads(members.stdout)
        assert f"strom {app_id} driver on {socket.gethostname()} pid {os.getpid()}" in member["client_id"]
        assert "local[2]" in member["client_id"] and member["host"]
        elsewhere = tmp_path / "another-machine"  # no state directory, no task lock to see
        for refused in (_strom(bootstrap, "streams", "reset", app_id, "--state-dir", str(elsewhere)),
                        _strom(bootstrap, "groups", "reset-offsets", app_id, "--topic", source,
                               "--to-earliest"),
                        _strom(bootstrap, "groups", "delete", app_id)):
            assert refused.returncode == 2, refused.stderr
            assert f"error: Application {app_id} is running: 1 instance(s) (strom {app_id} driver on" \
                   in refused.stderr
    finally:
        instance.close()  # leaves the group at once, and deletes it
    assert f"{app_id}.instances" not in _group_names(admin)
    listed = json.loads(_strom(bootstrap, "groups", "list", "--output", "json").stdout)
    assert {"group": app_id, "type": "classic", "state": "empty"} in listed
    reset = _strom(bootstrap, "streams", "reset", app_id, "--input-topics", source,
                   "--state-dir", str(tmp_path))
    assert reset.returncode == 0, reset.stderr
    assert offsets.committed(clients.admin(bootstrap), app_id, [(source, 0)]) == {(source, 0): 0}


def test_a_time_without_a_zone_is_local_time_in_both_reset_commands(broker, tmp_path):
    """As Kafka's kafka-consumer-groups and kafka-streams-application-reset read it: 2023-11-15T07:13:24
    in Tokyo (UTC+9) is BASE_MS + 4 s, whose first records are offset 2 of each partition."""
    bootstrap, app_id, source, *_ = _setup(broker, tmp_path)
    env = {**os.environ, "TZ": "Asia/Tokyo"}
    when = ["--to-datetime", "2023-11-15T07:13:24"]
    commands = {"streams reset": ["streams", "reset", app_id, "--input-topics", source, "--state-dir",
                                  str(tmp_path), "--dry-run", *when],
                "groups reset-offsets": ["groups", "reset-offsets", app_id, "--topic", source, "--dry-run",
                                         "--output", "json", *when]}
    for name, args in commands.items():
        done = subprocess.run([STROM, *args, "--bootstrap-servers", bootstrap], capture_output=True,
                              text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        if name == "streams reset":
            assert f"input {source}-0: committed offset of group {app_id} -> 2" in done.stdout, done.stdout
        else:
            assert {row["new_offset"] for row in json.loads(done.stdout)} == {2}, done.stdout


def _group_names(admin) -> set[str]:
    return {group.group_id for group in admin.list_consumer_groups().result().valid}


def test_the_last_instance_to_stop_deletes_the_instances_group(broker, tmp_path):
    """An instance stopping while another runs leaves the group to it; the last one deletes it."""
    bootstrap, app_id, source, *_, admin = _setup(broker, tmp_path)
    group = f"{app_id}.instances"
    first = ApplicationInstance(bootstrap, app_id, source, "first")
    second = ApplicationInstance(bootstrap, app_id, source, "second")
    try:
        deadline = time.monotonic() + 60
        while len(admin.describe_consumer_groups([group])[group].result().members) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        first.close()
        (member,) = admin.describe_consumer_groups([group])[group].result().members
        assert member.client_id.endswith("second")
    finally:
        first.close()
        second.close()
    assert group not in _group_names(admin)
