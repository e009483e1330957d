"""RocksDB options: Kafka Streams' defaults, and ``rocksdb.config.setter`` changing them per store."""

from __future__ import annotations

import pytest
from rocksdict import BlockBasedOptions, Options

from strom.errors import ConfigError
from strom.kafka.serdes import Serdes
from strom.streams import Materialized, Produced, Stores, StreamsBuilder, TopologyTestDriver
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import TimeWindows
from strom.streams.state.rocksdb import (
    BLOCK_SIZE,
    MAX_WRITE_BUFFERS,
    MEMTABLE_BLOOM_RATIO,
    WRITE_BUFFER_BYTES,
    config_setter,
)

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


def _options_file(db_dir) -> dict[str, dict[str, str]]:
    """The options RocksDB wrote to the newest OPTIONS file of a database: section -> name -> value."""
    newest = max(db_dir.glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    sections: dict[str, dict[str, str]] = {}
    section: dict[str, str] = {}
    for line in newest.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
        elif "=" in line:
            name, _, value = line.partition("=")
            section[name] = value
    return sections


def _count_store_options(tmp_path, setter=None) -> dict[str, dict[str, str]]:
    builder = StreamsBuilder()
    (builder.stream("in").group_by_key()
     .count(materialized=Materialized.as_(Stores.persistent_key_value_store("counts")))
     .to_stream().to("out"))
    config = {"application.id": "options-app", "state.dir": str(tmp_path), "default.key.serde": "String",
              "default.value.serde": "String"}
    if setter is not None:
        config["rocksdb.config.setter"] = setter
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in", Serdes.String(), Serdes.String()).pipe_input("a", "v")
        (db_dir,) = [path for path in tmp_path.rglob("counts") if path.is_dir()]
        return _options_file(db_dir)


def test_a_store_opens_with_the_point_lookup_options(tmp_path):
    options = _count_store_options(tmp_path)
    family = options['CFOptions "default"']
    table = options['TableOptions/BlockBasedTable "default"']
    assert family["memtable_whole_key_filtering"] == "true"
    assert float(family["memtable_prefix_bloom_size_ratio"]) == MEMTABLE_BLOOM_RATIO
    assert int(family["write_buffer_size"]) == WRITE_BUFFER_BYTES
    assert int(family["max_write_buffer_number"]) == MAX_WRITE_BUFFERS
    assert family["compression"] == "kNoCompression"
    assert family["level_compaction_dynamic_level_bytes"] == "true"
    assert int(table["block_size"]) == BLOCK_SIZE
    assert table["filter_policy"] == "bloomfilter"
    assert table["cache_index_and_filter_blocks"] == "false"


class ScanTuningSetter:
    """A setter replacing the table options and the memtable filter, as a user tuning for scans would."""

    def set_config(self, store_name: str, options: Options, configs: dict) -> None:
        table = BlockBasedOptions()
        table.set_block_size(16 * 1024)
        options.set_block_based_table_factory(table)
        options.set_memtable_prefix_bloom_ratio(0.0)
        options.set_write_buffer_size(4 * 1024 * 1024)


def test_the_setter_overrides_strom_s_options(tmp_path):
    options = _count_store_options(tmp_path, ScanTuningSetter)
    family = options['CFOptions "default"']
    table = options['TableOptions/BlockBasedTable "default"']
    assert int(table["block_size"]) == 16 * 1024
    assert float(family["memtable_prefix_bloom_size_ratio"]) == 0.0
    assert int(family["write_buffer_size"]) == 4 * 1024 * 1024


def test_the_setter_sets_a_window_store_s_segments(tmp_path):
    CALLS.clear()
    builder = StreamsBuilder()
    (builder.stream("in").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(100))
     .count(materialized=Materialized.as_(Stores.persistent_timestamped_window_store("windows", 1_000, 100)))
     .to_stream().to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(Serdes.String(), 100),
                                           Serdes.Long())))
    config = {"application.id": "window-app", "state.dir": str(tmp_path), "default.key.serde": "String",
              "default.value.serde": "String", "rocksdb.config.setter": RecordingSetter}
    with TopologyTestDriver(builder.build(), config) as driver:
        source = driver.create_input_topic("in", Serdes.String(), Serdes.String())
        for key, timestamp in (("a", 0), ("a", 50), ("b", 150)):
            source.pipe_input(key, "v", timestamp)
        segments = [path for path in tmp_path.rglob("windows.*") if path.is_dir()]
        assert segments
        for segment in segments:
            assert int(_options_file(segment)['CFOptions "default"']["write_buffer_size"]) == 4 * 1024 * 1024
    assert CALLS == [("windows", True, "window-app")]
