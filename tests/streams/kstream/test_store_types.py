"""Which inner store DSL operators get: the Materialized's supplier, else its StoreType, else
default.dsl.store given to StreamsBuilder.build(props) (Kafka's KIP-591)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from strom.errors import ConfigError, TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    JoinWindows,
    Materialized,
    SessionWindows,
    StoreType,
    StreamsBuilder,
    TimeWindows,
    TopologyTestDriver,
)
from strom.streams.state.stores import Stores

S = Serdes.String()
PROPS = {"application.id": "store-types", "default.key.serde": "String", "default.value.serde": "String"}


def topology_with_every_dsl_store(builder: StreamsBuilder) -> None:
    events = builder.stream("events")
    grouped = events.group_by_key()
    grouped.count(Materialized.as_("counts"))
    minutes = TimeWindows.of_size_with_no_grace(timedelta(minutes=1))
    grouped.windowed_by(minutes).count(Materialized.as_("per-minute"))
    grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(1000)).count(Materialized.as_("sessions"))
    clicks = builder.stream("clicks")
    events.left_join(clicks, lambda a, b: a, JoinWindows.of_time_difference_with_no_grace(100))
    users = builder.table("users", Materialized.as_("users"))
    builder.table("orders", Materialized.as_("orders")).join(users, lambda order: order, lambda o, u: o)
    grouped.reduce(lambda a, b: b, Materialized.as_(Stores.persistent_key_value_store("explicit")))
    typed = Materialized.as_("typed").with_store_type(StoreType.ROCKS_DB)
    grouped.aggregate(lambda: "", lambda k, v, a: v, typed)


def persistence(props: dict, build_props: dict | None) -> dict[str, bool]:
    builder = StreamsBuilder()
    topology_with_every_dsl_store(builder)
    with TopologyTestDriver(builder.build(build_props), props) as driver:
        return {name: store.persistent for name, store in driver.get_all_state_stores().items()}


def test_default_dsl_store_in_memory_reaches_every_store_that_chose_none():
    stores = persistence(PROPS, {**PROPS, "default.dsl.store": "in_memory"})
    # tables, aggregations, windows, sessions, the left join's two windows and outer store, FK subscriptions
    assert sorted(stores) == [
        "KSTREAM-LEFTJOINOTHER-0000000008-store", "KSTREAM-LEFTJOINTHIS-0000000007-store",
        "KSTREAM-OUTERSHARED-0000000010-store", "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000018",
        "counts", "explicit", "orders", "per-minute", "sessions", "typed", "users"]
    chosen = {"explicit": True, "typed": True}
    assert {name: persistent for name, persistent in stores.items() if persistent} == chosen


def test_rocksdb_is_the_default_and_a_later_build_chooses_again():
    assert all(persistence(PROPS, None).values())
    builder = StreamsBuilder()
    builder.stream("events").group_by_key().count(Materialized.as_("counts"))
    builder.build({**PROPS, "default.dsl.store": "in_memory"})
    with TopologyTestDriver(builder.build(PROPS), PROPS) as driver:
        assert driver.get_state_store("counts").persistent


def test_materialized_store_type_picks_in_memory_for_one_operator():
    builder = StreamsBuilder()
    grouped = builder.stream("events").group_by_key()
    grouped.count(Materialized.as_(StoreType.IN_MEMORY))
    grouped.reduce(lambda a, b: b, Materialized.as_("latest").with_store_type(StoreType.IN_MEMORY))
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        assert not any(store.persistent for store in driver.get_all_state_stores().values())
        driver.create_input_topic("events", S, S).pipe_input("k", "v")
        assert driver.get_key_value_store("latest").get("k") == "v"


def test_bad_store_types_are_named():
    with pytest.raises(ConfigError, match="'rocksDB' or 'in_memory'"):
        StreamsBuilder().build({**PROPS, "default.dsl.store": "memory"})
    with pytest.raises(TopologyError, match=r"StoreType\.ROCKS_DB or StoreType\.IN_MEMORY"):
        Materialized.as_("x").with_store_type("in_memory")


def test_a_runtime_config_naming_another_dsl_store_is_flagged(caplog):
    builder = StreamsBuilder()
    builder.stream("events").group_by_key().count()
    with TopologyTestDriver(builder.build(PROPS), {**PROPS, "default.dsl.store": "in_memory"}):
        pass
    assert "applies only when passed to StreamsBuilder.build(props)" in caplog.text
