"""Runtime nodes of one task's sub-topology: sources, processors and sinks, wired depth-first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.errors import StromError, TopologyError
from strom.kafka.serdes import encoder_of, packer_of
from strom.streams.internals.tuples import new_tuple
from strom.streams.processor.api import Processor, Record
from strom.streams.processor.internals.collector import RecordCollector
from strom.streams.processor.internals.context import ProcessorContextImpl, TaskContext
from strom.streams.processor.internals.fusion import FusedStep, fuse
from strom.streams.processor.partitioner import partition_chooser
from strom.streams.state.context import RecordContext


class ContextFreeProcessor(Processor):
    """A processor that never reads the record context (the topic, partition, offset and headers of the
    record being processed; a record's own fields it may read). When every processor of a task is one,
    the task does not make a context per record: a fifth of a stateless chain's time."""


class ProcessorNode:
    """A processor instance, its children and the stores it may use.

    ``entry`` is what a parent's forward calls: the processor's ``process`` itself, or, for a node with
    stores, a wrapper that first makes the record's timestamp and headers the task's current record
    context (stores stamp cached entries and changelog records with it).
    """

    def __init__(self, name: str, processor: Processor, stores: list[str]) -> None:
        self.name = name
        self.processor = processor
        self.stores = stores
        self.children: list[ProcessorNode] = []
        self.context: ProcessorContextImpl | None = None
        self.entry: Callable[[Record], None] = processor.process
        self.fed_by_sources_only = False
        """Every parent is a source node: records arrive with the task's record context as they are."""
        self.stamping_entry: Callable[[Record], None] | None = None
        """The entry that stamps the record's timestamp and headers into the record context (a node
        with stores fed by processors), else None."""

    def init(self, task: TaskContext) -> None:
        self.context = ProcessorContextImpl(task, self)
        if self.stores and not self.fed_by_sources_only:
            process = self.processor.process

            def entry(record: Record) -> None:
                current = task.record_context
                headers = record.raw_headers
                if current.timestamp != record.timestamp or current.headers is not headers:
                    task.record_context = new_tuple(
                        RecordContext,
                        (record.timestamp, current.topic, current.partition, current.offset, headers),
                    )
                process(record)

            self.entry = self.stamping_entry = entry
        else:
            self.entry = self.processor.process
        if task.processing_failed is not None:
            self.entry = _guarded(self, self.entry, task.processing_failed)

    def wire(self) -> None:
        assert self.context is not None
        self.context.wire()
        if isinstance(self, SourceNode):
            self.entry = self.context.forwarder  # a source only forwards: skip its processor

    def start(self) -> None:
        assert self.context is not None
        self.processor.init(self.context)

    def close(self) -> None:
        self.processor.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


def _guarded(node: ProcessorNode, entry: Callable[[Record], None],
             failed: Callable[[ProcessorNode, Record, Exception], None]) -> Callable[[Record], None]:
    """``entry`` with what the node's processor raises handed to the processing exception handler: on
    CONTINUE the record stops at this node and the parent goes on with its other children (KIP-1033).
    Strom's own errors (a failed send, a fatal handler response further down) pass through."""

    def guarded(record: Record) -> None:
        try:
            entry(record)
        except StromError:
            raise
        except Exception as exc:
            failed(node, record, exc)

    return guarded


class SourceNode(ProcessorNode):
    """Reads topics: deserializes with its serdes, then forwards to its children."""

    def __init__(
        self, name: str, topics: list[str], key_serde: Any, value_serde: Any, timestamp_extractor: Any
    ) -> None:
        super().__init__(name, _ForwardProcessor(), [])
        self.topics = topics
        self.key_deserializer = key_serde.deserializer()
        self.value_deserializer = value_serde.deserializer()
        self.timestamp_extractor = timestamp_extractor
        self.record_timestamp_when_valid = getattr(timestamp_extractor, "record_timestamp_when_valid", False)
        """The extractor returns a record's own timestamp when it is not negative: the task skips the call."""
        self.chain: Callable[[Any, Any, int, Any], None] | None = None
        """The source's chain of stateless operators fused into one function (fusion.py), called with
        ``(key, value, timestamp, headers)`` instead of ``entry`` with a Record; None: not fused."""

    def fuse_chain(self) -> None:
        """Once every node is wired and started: fuse the chain below this source (a single child's)."""
        self.chain = fuse(self.children[0]) if len(self.children) == 1 else None


class _ForwardProcessor(ContextFreeProcessor):
    def process(self, record: Record) -> None:
        self.context.forward(record)


class SinkProcessor(ContextFreeProcessor):
    """Serializes and sends each record to a topic (fixed, or chosen per record by an extractor)."""

    def __init__(
        self,
        collector: RecordCollector,
        topic: str | None,
        topic_extractor: Any,
        key_serde: Any,
        value_serde: Any,
        partitioner: Any,
        decorate: Callable[[str], str],
    ) -> None:
        self.collector = collector
        self.topic = topic
        self.topic_extractor = topic_extractor
        self.key_serialize = key_serde.serializer().serialize
        self.value_serialize = value_serde.serializer().serialize
        self.key_encode = encoder_of(key_serde.serializer(), topic)
        self.value_encode = encoder_of(value_serde.serializer(), topic)
        self.key_packer = packer_of(key_serde.serializer())
        self.value_packer = packer_of(value_serde.serializer())
        self.choose = None if partitioner is None else partition_chooser(partitioner)
        self.decorate = decorate
        if topic is not None and partitioner is None:
            self.process = self._send_to_topic  # type: ignore[method-assign]

    def process(self, record: Record) -> None:
        topic = self.topic
        if topic is None:
            topic = self.decorate(self.topic_extractor(record.key, record.value, record))
        if self.choose is None:
            self._send(topic, None, record)
            return
        partitions = self.choose(topic, record.key, record.value, self._partition_count)
        if partitions is None:
            self._send(topic, None, record)
            return
        for partition in sorted(partitions):  # none: dropped; several: multicast (KIP-837)
            self._send(topic, partition, record)

    def _partition_count(self, topic: str) -> int:
        count = getattr(self.collector.sink, "partition_count", None)
        if count is None:
            raise TopologyError(f"A StreamPartitioner needs the partition count of {topic!r}, which this "
                                "runtime's record sink cannot tell.")
        return count(topic)

    def fused_step(self) -> FusedStep | None:
        """``_send_to_topic`` as a chain's last step (the common sink only)."""
        if self.process != self._send_to_topic:
            return None
        names = {"key_encode": self.key_encode, "value_encode": self.value_encode,
                 "send_record": self._send_to_topic, "collector": self.collector, "topic": self.topic}
        key_line, value_line = _encoding("k", "key", self.key_packer, names), _encoding(
            "v", "value", self.value_packer, names)
        return FusedStep((
            "try:",
            f"    {key_line}",
            f"    {value_line}",
            "except Exception:",  # an input the encoder does not take: the sink's own path decides
            "    {p}send_record(_new_tuple(_Record, (k, v, t, h)))",
            "    return",
            "if {p}collector.send_error is not None:",
            "    {p}collector.check_error()",
            "{p}collector.sink.send({p}collector, {p}topic, None, kb, vb, t, h)",
        ), names, terminal=True)

    def _send_to_topic(self, record: Record) -> None:
        """``process`` of the common sink (one topic, the default partitioner): the per-record hot path."""
        key, value, timestamp, headers = record
        try:
            key_bytes = None if key is None else self.key_encode(key)
            value_bytes = None if value is None else self.value_encode(value)
        except Exception:  # an input the encoder does not take: the collector serializes or reports it
            self._send(self.topic, None, record)  # type: ignore[arg-type]
            return
        collector = self.collector  # collector.send_bytes, inlined: a call less per output record
        if collector.send_error is not None:
            collector.check_error()
        collector.sink.send(collector, self.topic, None, key_bytes, value_bytes, timestamp, headers)  # type: ignore[arg-type]

    def _send(self, topic: str, partition: int | None, record: Record) -> None:
        self.collector.send(
            topic,
            record.key,
            record.value,
            record.timestamp,
            record.raw_headers,
            self.key_serialize,
            self.value_serialize,
            partition,
        )


def _encoding(var: str, which: str, packer: tuple[tuple[type, ...], Callable[[Any], bytes]] | None,
              names: dict[str, Any]) -> str:
    """The fused sink's line serializing local ``var`` into ``{var}b`` with the ``{which}_encode`` of
    ``names``; a value of a type the serializer packs in one C call (``packer_of``) is packed inline,
    the packer added to ``names``."""
    if packer is None:
        return f"{var}b = None if {var} is None else {{p}}{which}_encode({var})"
    names[f"{which}_kinds"], names[f"{which}_pack"] = packer
    return (f"{var}b = None if {var} is None else {{p}}{which}_pack({var}) "
            f"if type({var}) in {{p}}{which}_kinds else {{p}}{which}_encode({var})")
