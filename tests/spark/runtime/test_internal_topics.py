"""Internal topics as Kafka Streams creates them: replication.factor (-1: the broker's default), topic.*
configs on repartition and changelog topics, windowed changelogs kept for the window's retention plus
windowstore.changelog.additional.retention.ms. Planned and created against the real broker (no Spark)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import ConfigResource

from strom.errors import ConfigError
from strom.kafka import clients
from strom.spark.runtime.plan import create_internal_topics, plan_application
from strom.streams import Grouped, Serdes, StreamsBuilder, TimeWindows
from strom.streams.config import StreamsConfig

pytestmark = pytest.mark.broker
HOUR_MS = 3_600_000


def _topology(source: str):
    builder = StreamsBuilder()
    stream = builder.stream(source)
    stream.group_by(lambda k, v: v, Grouped.with_(Serdes.String(), Serdes.String())).count()
    stream.group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(60_000)).count()
    return builder.build()


def _configs(admin, topic: str) -> dict[str, str]:
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {name: entry.value for name, entry in future.result(timeout=30).items()}


def test_internal_topics_get_topic_configs_replication_and_window_retention(broker):
    bootstrap = broker.bootstrap_servers
    source = f"it-source-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {source: 2})
    app_id = f"it-{uuid.uuid4().hex[:8]}"
    config = StreamsConfig({"application.id": app_id, "bootstrap.servers": bootstrap,
                            "replication.factor": -1, "topic.max.message.bytes": "2000000",
                            "windowstore.changelog.additional.retention.ms": HOUR_MS})
    admin = clients.admin(bootstrap)
    plan = plan_application(_topology(source), config, admin)
    created = create_internal_topics(plan, admin, bootstrap)

    described = {name: _configs(admin, name) for name in created}
    repartition = [n for n in created if n.endswith("-repartition")]
    changelogs = [n for n in created if n.endswith("-changelog")]
    assert len(repartition) == 1 and len(changelogs) == 2
    assert all(d["max.message.bytes"] == "2000000" for d in described.values())
    (windowed,) = [n for n in changelogs if described[n]["cleanup.policy"] == "compact,delete"]
    assert [described[n]["cleanup.policy"] for n in changelogs].count("compact") == 1
    assert described[windowed]["retention.ms"] == str(60_000 + HOUR_MS)
    metadata = admin.list_topics(timeout=30).topics
    assert all(len(metadata[name].partitions[0].replicas) == 1 for name in created)


def test_a_replication_factor_the_cluster_cannot_give_fails_creating_internal_topics(broker):
    bootstrap = broker.bootstrap_servers
    source = f"it-source-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {source: 1})
    config = StreamsConfig({"application.id": f"it-{uuid.uuid4().hex[:8]}", "bootstrap.servers": bootstrap,
                            "replication.factor": 3})
    admin = clients.admin(bootstrap)
    plan = plan_application(_topology(source), config, admin)
    assert plan.replication_factor == 3
    with pytest.raises(ConfigError, match=r"replication\.factor"):
        create_internal_topics(plan, admin, bootstrap)
