"""A transactional producer with one error policy, for everything in strom that writes exactly once (the
Spark sink's write tasks, the stream tasks of the Spark runtime).

Every transactional call, and any other client call the owner routes through ``call``, fails the same way:

- fenced (another producer with the same ``transactional.id`` took over; librdkafka's ``_FENCED`` or
  the broker's PRODUCER_FENCED / INVALID_PRODUCER_EPOCH): ``ProducerFencedError``. The producer is
  unusable from then on; the newer instance owns the work.
- an error after which the transaction can only be aborted (``txn_requires_abort``): the transaction
  is aborted, so none of its records ever becomes visible, then ``BrokerUnavailableError``.
- any other Kafka error: ``BrokerUnavailableError`` naming the owner, the call and the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from strom.errors import BrokerUnavailableError, ProducerFencedError
from strom.kafka import clients

__all__ = ["FENCED", "TIMEOUT_S", "TransactionalProducer"]

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0
"""How long init, send-offsets, commit and abort may take before the broker counts as unavailable."""
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})

T = TypeVar("T")


class TransactionalProducer:
    """A confluent-kafka producer with ``transactional.id`` set; ``producer`` is the client itself, for
    ``produce``, ``poll`` and ``flush`` on the hot path. ``owner`` says what it writes for, in errors
    (e.g. "Stream task app-0_1")."""

    def __init__(self, bootstrap_servers: str, transactional_id: str, owner: str,
                 timeout_s: float = TIMEOUT_S, **overrides: Any) -> None:
        self.transactional_id = transactional_id
        self.owner = owner
        self.timeout_s = timeout_s
        self.in_transaction = False
        self._bootstrap_servers = bootstrap_servers
        self.producer: Producer = clients.producer(
            bootstrap_servers, **{**overrides, "transactional.id": transactional_id})

    def init_transactions(self) -> None:
        """Fences every earlier producer of this ``transactional.id`` and aborts its open transaction."""
        self.call(self.producer.init_transactions, self.timeout_s)

    def begin_transaction(self) -> None:
        self.call(self.producer.begin_transaction)
        self.in_transaction = True

    def send_offsets_to_transaction(self, offsets: Sequence[TopicPartition], group_metadata: Any) -> None:
        self.call(self.producer.send_offsets_to_transaction, offsets, group_metadata, self.timeout_s)

    def commit_transaction(self) -> None:
        self.call(self.producer.commit_transaction, self.timeout_s)
        self.in_transaction = False

    def abort_transaction(self) -> None:
        """Aborts the open transaction, if there is one. A failure is logged, not raised: the next
        ``init_transactions`` of this ``transactional.id`` aborts the transaction anyway."""
        if not self.in_transaction:
            return
        self.in_transaction = False
        try:
            self.producer.abort_transaction(self.timeout_s)
        except KafkaException as exc:
            log.warning("%s: abort_transaction failed (%s); the next init_transactions of %s aborts it",
                        self.owner, exc, self.transactional_id)

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``method(*args, **kwargs)`` under this producer's error policy (see the module)."""
        try:
            return method(*args, **kwargs)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            name = getattr(method, "__name__", str(method))
            if error.code() in FENCED:
                self.in_transaction = False
                raise ProducerFencedError(
                    f"{self.owner} was fenced in {name}: another producer with transactional.id "
                    f"{self.transactional_id!r} took over (a newer attempt of the same work).") from exc
            if error.txn_requires_abort():
                self.abort_transaction()
            raise BrokerUnavailableError(f"{self.owner} failed in {name}: {error.str()}. Check the broker at "
                                         f"{self._bootstrap_servers}.") from exc
