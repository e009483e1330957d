"""The Kafka Streams DSL: StreamsBuilder, KStream, KTable, grouped streams and tables, and their options."""

from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.change import Change
from strom.streams.kstream.grouped import KGroupedStream, KGroupedTable
from strom.streams.kstream.kstream import BranchedKStream, KStream
from strom.streams.kstream.ktable import KTable, ValueTransformerWithKey
from strom.streams.kstream.options import (
    Branched,
    Consumed,
    Grouped,
    Materialized,
    Named,
    Printed,
    Produced,
    Repartitioned,
    StoreType,
)

__all__ = [
    "Branched",
    "BranchedKStream",
    "Change",
    "Consumed",
    "Grouped",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Printed",
    "Produced",
    "Repartitioned",
    "StoreType",
    "StreamsBuilder",
    "ValueTransformerWithKey",
]
