"""Headers as Kafka's: ordered, repeatable keys, add/remove/last_header; the same object goes to
confluent-kafka's producer and wraps what its consumer reads, and strom.tasks and strom.streams take it."""

from __future__ import annotations

import pytest

from strom.kafka import clients
from strom.kafka.headers import Header, Headers
from strom.kafka.serdes import Serdes
from strom.streams import Processor, Record, StreamsBuilder, TopologyTestDriver


def test_headers_behave_as_kafkas():
    headers = Headers([("trace", b"1")]).add("user", "ann").add("trace", b"2")
    assert headers.last_header("trace") == Header("trace", b"2")
    assert [h.value for h in headers.headers("trace")] == [b"1", b"2"]
    assert headers.last_header("missing") is None
    assert headers.remove("trace") is headers and headers == [("user", b"ann")]
    assert headers.to_array() == [Header("user", b"ann")] and Headers() == []


@pytest.mark.broker
def test_the_same_headers_go_to_the_producer_and_wrap_what_the_consumer_reads(broker):
    bootstrap = broker.bootstrap_servers
    topic = f"headers-{id(broker)}"
    clients.create_topics(bootstrap, {topic: 1})
    producer = clients.producer(bootstrap)
    producer.produce(topic, b"v", b"k", headers=Headers().add("a", b"1").add("a", None).add("b", "x"))
    assert producer.flush(30) == 0
    consumer = clients.consumer(bootstrap, group_id=f"{topic}-reader", **{"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        message = None
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                break
    finally:
        consumer.close()
    read = Headers(message.headers())
    assert read == [("a", b"1"), ("a", None), ("b", b"x")] and read.last_header("a").value is None


class Tag(Processor):
    def init(self, context):
        self.context = context

    def process(self, record: Record) -> None:
        self.context.forward(record.with_headers(Headers(record.headers).add("seen", b"yes")))


def test_streams_take_headers_from_input_to_records(tmp_path):
    S = Serdes.String()
    builder = StreamsBuilder()
    builder.stream("in").process(Tag).to("out")
    props = {"application.id": "h", "state.dir": str(tmp_path), "default.key.serde": "String",
             "default.value.serde": "String"}
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", 1, Headers().add("trace", b"7"))
        out = driver.create_output_topic("out", S, S).read_record()
    assert Headers(out.headers) == [("trace", b"7"), ("seen", b"yes")]
