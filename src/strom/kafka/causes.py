"""The chain of exceptions behind one: strom's errors keep librdkafka's ``KafkaException`` as their cause
(or context), and callers ask what Kafka said underneath (a fence, a timeout, a missing ACL)."""

from __future__ import annotations

from collections.abc import Iterator

from confluent_kafka import KafkaError, KafkaException

__all__ = ["causes", "kafka_error"]


def causes(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or during, each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError ``exc`` carries, if it is a KafkaException."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None
