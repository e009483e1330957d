"""Wire compatibility with Java Decaton, against the real strom broker: the bytes are built and read with
classes protoc generates from Decaton's published .proto (tests/tasks/decaton_proto), never strom's own.

A Java DecatonClient writes the task as the value and its ``TaskMetadataProto`` in the ``dt_meta`` header;
Decaton's retry writes to ``<topic>-retry`` with retry_count + 1 and scheduled_time_millis = now + backoff.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from pathlib import Path

import pytest
from grpc_tools import protoc

from strom.kafka import clients
from strom.tasks import (
    DecatonClient,
    PerKeyQuotaConfig,
    ProcessorsBuilder,
    RetryConfig,
    SubscriptionBuilder,
    SubscriptionState,
)
from support.kafka import create_topic, read_topic, unique, wait_for

pytestmark = pytest.mark.broker

PROTO_DIR = Path(__file__).parent / "decaton_proto"


@pytest.fixture(scope="module")
def decaton_pb(tmp_path_factory):
    """The modules protoc generates from Decaton's .proto files: (decaton_pb2, decaton_internal_pb2)."""
    out = tmp_path_factory.mktemp("decaton_pb")
    assert protoc.main(["protoc", f"-I{PROTO_DIR}", f"--python_out={out}", str(PROTO_DIR / "decaton.proto"),
                        str(PROTO_DIR / "decaton_internal.proto")]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("decaton_pb2"), importlib.import_module("decaton_internal_pb2")
    finally:
        sys.path.remove(str(out))


def _produce(bootstrap: str, topic: str, key: bytes, value: bytes, headers: list) -> None:
    producer = clients.producer(bootstrap)
    producer.produce(topic, value, key, headers=headers)
    assert producer.flush(30) == 0


def _subscribe(bootstrap: str, topic: str, process, props: dict | None = None,
               retry: RetryConfig | None = None):
    builder = (SubscriptionBuilder.new_builder(unique("wire"))
               .processors_builder(ProcessorsBuilder.consuming(topic, json.loads).then_process(process))
               .properties({"decaton.commit.interval.ms": 100, **(props or {})})
               .consumer_config({"bootstrap.servers": bootstrap}))
    if retry is not None:
        builder.enable_retry(retry)
    return builder.build_and_start()


def test_a_java_decaton_clients_record_is_read_with_its_metadata(broker, decaton_pb):
    decaton_pb2, _ = decaton_pb
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1)
    scheduled = int(time.time() * 1000) + 500
    meta = decaton_pb2.TaskMetadataProto(timestamp_millis=1234, source_application_id="java-app",
                                         source_instance_id="java-host", scheduled_time_millis=scheduled)
    _produce(bootstrap, topic, b"user-1", b'{"n": 1}', [("dt_meta", meta.SerializeToString())])
    seen = []
    subscription = _subscribe(bootstrap, topic, lambda context, task: seen.append((context.metadata(), task,
                                                                                    time.time())))
    try:
        assert wait_for(lambda: seen)
    finally:
        subscription.close()
    metadata, task, processed_at = seen[0]
    assert task == {"n": 1}
    assert (metadata.timestamp_ms, metadata.source_application_id, metadata.source_instance_id,
            metadata.retry_count, metadata.due_ms) == (1234, "java-app", "java-host", 0, scheduled)
    assert processed_at * 1000 >= scheduled  # Decaton's scheduled time holds the task back


def test_strom_decaton_clients_record_is_what_a_java_processor_reads(broker, decaton_pb):
    decaton_pb2, _ = decaton_pb
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1)
    with (DecatonClient.producing(topic, lambda task: json.dumps(task).encode()).application_id("shop")
          .instance_id("web-1").producer_config({"bootstrap.servers": bootstrap}).build()) as client:
        client.put("user-9", {"n": 9}, timestamp_ms=5_000, scheduled_time_ms=7_000).result(timeout=30)
    [record] = read_topic(bootstrap, topic, expected=1)
    assert record.key() == b"user-9" and json.loads(record.value()) == {"n": 9}
    [(name, raw)] = record.headers()
    assert name == "dt_meta"
    meta = decaton_pb2.TaskMetadataProto.FromString(raw)
    assert (meta.timestamp_millis, meta.source_application_id, meta.source_instance_id, meta.retry_count,
            meta.scheduled_time_millis) == (5_000, "shop", "web-1", 0, 7_000)


def test_retry_goes_to_topic_retry_in_decatons_format_and_reads_a_java_retry(broker, decaton_pb):
    decaton_pb2, _ = decaton_pb
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1)
    original = decaton_pb2.TaskMetadataProto(timestamp_millis=42, source_application_id="java-app",
                                             source_instance_id="java-host")
    _produce(bootstrap, topic, b"k", b'"first"',
             [("trace", b"t-1"), ("dt_meta", original.SerializeToString())])
    seen, lock = [], threading.Lock()

    def process(context, task):
        with lock:
            seen.append((task, context.metadata().retry_count))
        if task == "first" and context.metadata().retry_count == 0:
            context.headers().add("note", b"retried")  # Kafka's mutable Headers: the retry carries it
            context.retry()

    retried_at = time.time()
    subscription = _subscribe(bootstrap, topic, process, retry=RetryConfig.with_backoff(400))
    try:
        [retry_record] = read_topic(bootstrap, f"{topic}-retry", expected=1)
        # a retry record as a Java Decaton processor writes it: strom must process it as the 3rd attempt
        java_retry = decaton_pb2.TaskMetadataProto(timestamp_millis=7, retry_count=2,
                                                   scheduled_time_millis=int(time.time() * 1000))
        _produce(bootstrap, f"{topic}-retry", b"k2", b'"from-java"',
                 [("dt_meta", java_retry.SerializeToString())])
        assert wait_for(lambda: ("from-java", 2) in seen and ("first", 1) in seen)
    finally:
        subscription.close()
    assert retry_record.key() == b"k" and retry_record.value() == b'"first"'
    headers = retry_record.headers()
    assert ("trace", b"t-1") in headers and ("note", b"retried") in headers
    assert [n for n, _ in headers].count("dt_meta") == 1
    meta = decaton_pb2.TaskMetadataProto.FromString(dict(headers)["dt_meta"])
    assert (meta.timestamp_millis, meta.source_application_id, meta.source_instance_id, meta.retry_count) == (
        42, "java-app", "java-host", 1)
    assert meta.scheduled_time_millis >= int(retried_at * 1000) + 400  # the backoff, from the retry's time


def test_legacy_decaton_task_request_values_with_the_fallback(broker, decaton_pb):
    decaton_pb2, internal_pb2 = decaton_pb
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1)
    request = internal_pb2.DecatonTaskRequest(
        metadata=decaton_pb2.TaskMetadataProto(timestamp_millis=99, source_application_id="old-app"),
        serialized_task=b'{"n": 8}')
    _produce(bootstrap, topic, b"k", request.SerializeToString(), [])
    seen = []
    subscription = _subscribe(bootstrap, topic, lambda context, task: seen.append((context.metadata(), task)),
                              {"decaton.legacy.parse.fallback.enabled": True})
    try:
        assert wait_for(lambda: seen)
    finally:
        subscription.close()
    metadata, task = seen[0]
    assert task == {"n": 8} and (metadata.timestamp_ms, metadata.source_application_id) == (99, "old-app")


@pytest.mark.slow
def test_a_key_over_its_quota_goes_to_the_shaping_topic_and_is_processed_from_there(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1)
    seen, lock = [], threading.Lock()

    def process(context, task):
        with lock:
            seen.append((context.metadata().topic, context.key(), task))

    subscription = (SubscriptionBuilder.new_builder(unique("quota"))
                    .processors_builder(ProcessorsBuilder.consuming(topic, json.loads).then_process(process))
                    .properties({"decaton.commit.interval.ms": 100,
                                 "decaton.per.key.quota.processing.rate": 50})
                    .consumer_config({"bootstrap.servers": bootstrap})
                    .enable_per_key_quota(PerKeyQuotaConfig.shape(window_ms=300))
                    .build_and_start())
    producer = clients.producer(bootstrap)
    try:
        # rates are of consumption: produce once the partition is assigned, so nothing arrives in a burst
        assert wait_for(lambda: subscription.state is SubscriptionState.RUNNING)
        for i in range(20):  # "hot" at about 200 tasks/s, "cold" at 4/s (a loaded host: fewer, same ratio)
            for j in range(10):
                producer.produce(topic, json.dumps(i * 10 + j).encode(), b"hot")
            if i % 5 == 0:
                producer.produce(topic, json.dumps(i).encode(), b"cold")
            producer.poll(0)
            time.sleep(0.05)
        assert producer.flush(30) == 0
        assert wait_for(lambda: len(seen) == 204, timeout_s=60)
    finally:
        subscription.close()
    shaped = [(key, task) for t, key, task in seen if t == f"{topic}-shaping"]
    assert shaped and all(key == b"hot" for key, _ in shaped)  # only the bursting key is shaped
    assert sorted(task for t, key, task in seen if key == b"hot") == list(range(200))  # each once
    assert len(read_topic(bootstrap, f"{topic}-shaping", expected=len(shaped))) == len(shaped)
