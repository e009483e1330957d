"""DecatonClient: puts tasks on a topic for a ProcessorSubscription, with Decaton's task metadata.

``DecatonClient.producing(topic, serializer).application_id("shop").producer_config({...}).build()``;
``client.put(key, task)`` returns a Future of where the task landed. Each task carries Decaton's metadata
in the ``dt_meta`` header (a ``TaskMetadataProto``: the time, the application and instance that produced
it, maybe a scheduled time before which its processor does not take it), so a Java Decaton processor reads
it as its own client's. Keys are partitioned as Kafka's Java clients do.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Generic, NamedTuple, Self, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message

from strom.errors import ConfigError, SerializationError
from strom.kafka import clients
from strom.kafka.serdes import Serde, Serializer, encoder_of
from strom.tasks.protocol import METADATA_HEADER, WireMetadata

__all__ = [
    "FLUSH_TIMEOUT_S",
    "DecatonClient",
    "DecatonClientBuilder",
    "PutTaskResult",
    "serializer_function",
]

T = TypeVar("T")
FLUSH_TIMEOUT_S = 30.0


class PutTaskResult(NamedTuple):
    topic: str
    partition: int
    offset: int


class DecatonClient(Generic[T]):
    """Produces tasks (thread-safe); ``close()`` (or ``with``) delivers what is in flight."""

    def __init__(self, topic: str, serializer: Callable[[T], bytes], application_id: str, instance_id: str,
                 producer_config: Mapping[str, Any]) -> None:
        self.topic = topic
        self._serializer = serializer_function(serializer, topic)
        self._application_id = application_id
        self._instance_id = instance_id
        config = dict(producer_config)
        bootstrap = config.pop("bootstrap.servers", None)
        if not bootstrap:
            raise ConfigError("DecatonClient needs producer_config({'bootstrap.servers': ...}).")
        self._producer = clients.producer(bootstrap, **{**clients.JAVA_PARTITIONER, **config})
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._poll, name=f"decaton-client-{topic}", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        """Serves delivery reports (they complete the Futures) while the client is open."""
        while not self._closed.is_set():
            self._producer.poll(0.05)

    @staticmethod
    def producing(topic: str, serializer: Callable[[T], bytes]) -> DecatonClientBuilder[T]:
        return DecatonClientBuilder(topic, serializer)

    def put(self, key: bytes | str | None, task: T, timestamp_ms: int | None = None,
            scheduled_time_ms: int | None = None) -> Future[PutTaskResult]:
        """Sends ``task``; the Future completes once the broker has it (or fails with the error).
        ``scheduled_time_ms`` (epoch ms) holds its processing back until then."""
        try:
            value = self._serializer(task)
        except Exception as exc:
            raise SerializationError(f"The serializer of DecatonClient({self.topic!r}) failed on {task!r}: "
                                     f"{type(exc).__name__}: {exc}") from exc
        timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        metadata = WireMetadata(timestamp_ms, self._application_id, self._instance_id, 0,
                                int(scheduled_time_ms or 0))
        result: Future[PutTaskResult] = Future()
        self._produce(key.encode() if isinstance(key, str) else key, value,
                      [(METADATA_HEADER, metadata.to_bytes())], timestamp_ms, result)
        return result

    def _produce(self, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]], timestamp_ms: int,
                 result: Future[PutTaskResult]) -> None:
        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                result.set_exception(KafkaException(error))
            else:
                result.set_result(PutTaskResult(message.topic(), message.partition(), message.offset()))

        clients.produce(self._producer, self.topic, value, key, headers=headers, timestamp=timestamp_ms,
                        on_delivery=delivered)

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> int:
        """Waits for the tasks in flight; returns how many are still undelivered."""
        return self._producer.flush(timeout_s)

    def close(self) -> None:
        """Delivers what is in flight, then stops; raises if tasks stay undelivered."""
        if self._closed.is_set():
            return
        undelivered = self.flush()
        self._closed.set()
        self._poller.join()
        if undelivered:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"DecatonClient({self.topic!r}): {undelivered} tasks undelivered "
                                            f"after {FLUSH_TIMEOUT_S:.0f}s; is the broker reachable?"))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serializer_function(serializer: Any, topic: str) -> Callable[[Any], bytes]:
    """A task serializer as one function: a function itself, or a strom Serde's or Serializer's."""
    if isinstance(serializer, Serde | Serializer):
        plain = serializer.serializer() if isinstance(serializer, Serde) else serializer
        return encoder_of(plain, topic)  # type: ignore[return-value]
    if callable(serializer):
        return serializer
    raise ConfigError("DecatonClient.producing needs a serializer (task -> bytes, or a strom Serde or "
                      f"Serializer), got {serializer!r}.")


class DecatonClientBuilder(Generic[T]):
    def __init__(self, topic: str, serializer: Callable[[T], bytes] | Serde[T] | Serializer[T]) -> None:
        serializer_function(serializer, topic)
        self._topic = topic
        self._serializer = serializer
        self._application_id: str | None = None
        self._instance_id = socket.gethostname()
        self._producer_config: dict[str, Any] = {}

    def application_id(self, application_id: str) -> Self:
        """Names the producing application in each task's metadata (required)."""
        self._application_id = application_id
        return self

    def instance_id(self, instance_id: str) -> Self:
        """Names the producing instance (default: the host name)."""
        self._instance_id = instance_id
        return self

    def producer_config(self, config: Mapping[str, Any]) -> Self:
        """librdkafka producer settings; ``bootstrap.servers`` is required."""
        self._producer_config = dict(config)
        return self

    def build(self) -> DecatonClient[T]:
        if not self._application_id:
            raise ConfigError("DecatonClient needs an application id: .application_id('my-app').")
        return DecatonClient(self._topic, self._serializer, self._application_id, self._instance_id,
                             self._producer_config)
