"""Option parsing of the "strom" data source: what Spark users type, and the errors they get."""

from __future__ import annotations

import pytest

from strom.errors import ConfigError
from strom.spark.connector.options import EARLIEST, LATEST, Subscription, sink_options, source_options
from strom.spark.connector.reader import OffsetRange
from strom.spark.connector.source import offsets_from_json, offsets_to_json, rate_limit, split_ranges

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "a,b"}


def _opts(**extra: str) -> dict[str, str]:
    """Spark passes options lower-cased (CaseInsensitiveDict)."""
    return {k.lower(): v for k, v in {**BASE, **extra}.items()}


def test_defaults_mirror_spark_kafka_connector():
    stream = source_options(_opts(), streaming=True)
    batch = source_options(_opts(), streaming=False)
    assert stream.subscription == Subscription(topics=("a", "b"))
    assert stream.starting.default == LATEST and batch.starting.default == EARLIEST
    assert batch.ending.default == LATEST
    assert stream.read_committed and stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_offsets_per_trigger is None


def test_kafka_prefixed_options_pass_through_to_the_client():
    parsed = source_options(_opts(**{"kafka.isolation.level": "read_uncommitted",
                                     "kafka.fetch.max.bytes": "1048576"}), streaming=True)
    assert parsed.client_config == {"isolation.level": "read_uncommitted", "fetch.max.bytes": "1048576"}
    assert not parsed.read_committed


def test_security_settings_are_checked_together():
    """SASL_SSL alone would be refused (librdkafka's default mechanism, GSSAPI, is not built in)."""
    login = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
             "kafka.sasl.username": "alice", "kafka.sasl.password": "pw"}
    assert source_options(_opts(**login), streaming=True).client_config["security.protocol"] == "SASL_SSL"


def test_per_partition_json_offsets():
    parsed = source_options(_opts(startingOffsets='{"a":{"0":23,"1":-2},"b":{"0":-1}}'), streaming=True)
    assert parsed.starting.per_partition == {("a", 0): 23, ("a", 1): EARLIEST, ("b", 0): LATEST}


@pytest.mark.parametrize(
    ("extra", "streaming", "named"),
    [
        ({"startingOffsets": '{"a":{"0":'}, True, "startingOffsets"),
        ({"startingOffsets": '{"a":[1,2]}'}, True, "startingOffsets"),
        ({"startingOffsets": "yesterday"}, True, "startingOffsets"),
        ({"startingOffsets": "latest"}, False, "startingOffsets"),
        ({"endingOffsets": '{"a":{"0":-2}}'}, False, "endingOffsets"),
        ({"endingOffsets": "latest"}, True, "endingOffsets"),
        ({"maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({"maxOffsetsPerTrigger": "100"}, False, "maxOffsetsPerTrigger"),
        ({"minPartitions": "0"}, False, "minPartitions"),
        ({"failOnDataLoss": "maybe"}, True, "failOnDataLoss"),
        ({"assign": '{"a":[0]}'}, True, "subscribe"),
        ({"subscribePatern": "a.*"}, True, "subscribePattern"),
        ({"kafka.isolation.level": "dirty"}, True, "kafka.isolation.level"),
        ({"kafka.group.id": "mine"}, True, "kafka.group.id"),
        ({"kafka.fetch.max.bytez": "1048576"}, True, r"Option 'kafka\.fetch\.max\.bytez'.*No such"),
        ({"kafka.fetch.max.bytes": "lots"}, False, r"Option 'kafka\.fetch\.max\.bytes'.*Invalid value"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM"}, True,
         r"Option 'kafka\.security\.protocol, kafka\.sasl\.mechanism'.*Unsupported SASL mechanism"),
    ],
)
def test_bad_options_name_the_option(extra, streaming, named):
    with pytest.raises(ConfigError, match=named):
        source_options(_opts(**extra), streaming=streaming)


def test_missing_bootstrap_and_subscription_are_named():
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap\.servers"):
        source_options({"subscribe": "a"}, streaming=True)
    with pytest.raises(ConfigError, match="subscribe"):
        source_options({"kafka.bootstrap.servers": "x:1"}, streaming=True)


def test_assign_and_pattern():
    assigned = source_options({"kafka.bootstrap.servers": "x:1", "assign": '{"t":[1,0]}'}, streaming=True)
    assert assigned.subscription.assigned == (("t", 0), ("t", 1))
    with pytest.raises(ConfigError, match="subscribePattern"):
        source_options({"kafka.bootstrap.servers": "x:1", "subscribepattern": "a(["}, streaming=True)


def _sink(streaming: bool = False, **extra: str):
    return sink_options({"kafka.bootstrap.servers": "x:1", **{k.lower(): v for k, v in extra.items()}},
                        streaming=streaming)


def test_sink_options():
    sink = _sink(topic="out", checkpointLocation="/tmp/c", **{"delivery.guarantee": "exactly_once"})
    assert sink.exactly_once and sink.topic == "out" and sink.write_version is None
    assert not _sink().exactly_once
    with pytest.raises(ConfigError, match=r"delivery\.guarantee"):
        _sink(**{"delivery.guarantee": "twice"})
    with pytest.raises(ConfigError, match=r"Option 'kafka\.compression\.type'.*zstdd"):
        _sink(**{"kafka.compression.type": "zstdd"})
    with pytest.raises(ConfigError, match="Option 'topic' is empty"):
        _sink(topic=" ")


def test_txn_app_id_and_version_name_a_batch_write():
    eos = {"delivery.guarantee": "exactly_once"}
    version = _sink(txnAppId="counts", txnVersion="7", **eos).write_version
    assert (version.app_id, version.version) == ("counts", 7)
    with pytest.raises(ConfigError, match="go together"):
        _sink(txnAppId="counts", **eos)
    with pytest.raises(ConfigError, match="txnVersion"):
        _sink(txnAppId="counts", txnVersion="-1", **eos)
    with pytest.raises(ConfigError, match=r"need delivery\.guarantee=exactly_once"):
        _sink(txnAppId="counts", txnVersion="1")
    with pytest.raises(ConfigError, match=r"are for df\.write"):
        _sink(streaming=True, txnAppId="counts", txnVersion="1", **eos)


def test_rate_limit_spreads_in_proportion_and_never_exceeds():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5}
    end = rate_limit(start, latest, 100)
    assert sum(end[tp] - start[tp] for tp in start) == 100
    assert end[("t", 0)] - 0 == 75 and end[("t", 1)] - 100 == 25 and end[("t", 2)] == 5
    assert rate_limit(start, latest, 1000) == latest


def test_min_partitions_cuts_ranges_in_proportion_to_their_size():
    ranges = [OffsetRange("t", 0, 0, 300), OffsetRange("t", 1, 50, 150)]
    assert split_ranges(ranges, 4) == [OffsetRange("t", 0, 0, 100), OffsetRange("t", 0, 100, 200),
                                       OffsetRange("t", 0, 200, 300), OffsetRange("t", 1, 50, 150)]
    assert split_ranges(ranges, 2) == ranges
    assert split_ranges([OffsetRange("t", 0, 5, 7)], 5) == [OffsetRange("t", 0, 5, 6),
                                                            OffsetRange("t", 0, 6, 7)]
    assert source_options(_opts(minPartitions="8"), streaming=True).min_partitions == 8


def test_offsets_json_round_trip():
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert offsets_from_json(as_json) == offsets
