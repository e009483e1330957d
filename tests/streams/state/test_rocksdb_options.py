"""RocksDB options: Kafka Streams' defaults, and ``rocksdb.config.setter`` changing them per store."""

from __future__ import annotations

import pytest
from rocksdict import Options

from strom.errors import ConfigError
from strom.kafka.serdes import Serdes
from strom.streams import Materialized, Stores, StreamsBuilder, TopologyTestDriver
from strom.streams.state.rocksdb import config_setter

CALLS: list[tuple[str, bool, str]] = []


class RecordingSetter:
    """A setter as a user writes one: it changes the options it is given."""

    def set_config(self, store_name: str, options: Options, configs: dict) -> None:
        options.set_write_buffer_size(4 * 1024 * 1024)
        CALLS.append((store_name, isinstance(options, Options), configs["application.id"]))


def setter_function(store_name: str, options: Options, configs: dict) -> None:
    CALLS.append((store_name, isinstance(options, Options), configs["application.id"]))


@pytest.mark.parametrize("setter", [RecordingSetter, RecordingSetter(), setter_function,
                                    f"{__name__}:RecordingSetter", f"{__name__}.setter_function"])
def test_the_setter_is_called_for_every_rocksdb_store_of_a_task(tmp_path, setter):
    CALLS.clear()
    builder = StreamsBuilder()
    (builder.stream("in").group_by_key()
     .count(materialized=Materialized.as_(Stores.persistent_key_value_store("counts")))
     .to_stream().to("out"))
    config = {"application.id": "setter-app", "state.dir": str(tmp_path), "default.key.serde": "String",
              "default.value.serde": "String", "rocksdb.config.setter": setter}
    with TopologyTestDriver(builder.build(), config) as driver:
        source = driver.create_input_topic("in", Serdes.String(), Serdes.String())
        out = driver.create_output_topic("out", Serdes.String(), Serdes.Long())
        for key in ("a", "b", "a"):
            source.pipe_input(key, "v")
        assert out.read_key_values_to_map() == {"a": 2, "b": 1}
    assert CALLS == [("counts", True, "setter-app")]


@pytest.mark.parametrize("bad", ["no_such_module_xyz:Setter", f"{__name__}:Missing", 42])
def test_a_setter_that_cannot_be_found_or_called_is_a_config_error(bad):
    with pytest.raises(ConfigError, match=r"rocksdb\.config\.setter"):
        config_setter(bad)
