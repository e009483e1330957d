"""A transactional producer with one error policy, for everything in strom that writes exactly once (the
Spark sink's write tasks, the stream threads and tasks of the Spark runtime).

Every transactional call, and any other client call the owner routes through ``call``, fails the same way:

- fenced (another producer with the same ``transactional.id`` took over; librdkafka's ``_FENCED`` or
  the broker's PRODUCER_FENCED / INVALID_PRODUCER_EPOCH): ``ProducerFencedError``. The producer is
  unusable from then on; the newer instance owns the work.
- an error after which the transaction can only be aborted (``txn_requires_abort``), or a retriable one
  (a coordinator loading or moving, a request timed out): the transaction is aborted, so none of its
  records ever becomes visible, then ``TransactionAbortableError``. The owner starts again from its last
  commit; nothing about the producer's identity is wrong.
- any other Kafka error: ``BrokerUnavailableError`` naming the owner, the call and the broker.
- ``send_offsets_to_transaction`` not returning within its bound (``send_offsets_timeout_s`` plus
  ``STALL_GRACE_S``: 7 s for a producer's first call, 4 s once it found the coordinators, longer while its
  ``Patience`` says the coordinators answer slowly; a ``patient`` producer's is its commit timeout):
  ``TransactionStalledError``, and the producer is ``stalled`` for good. librdkafka (up to 2.16 at
  least) waits for that call without a bound: its ``TxnOffsetCommit`` waits for the group coordinator's
  broker to change state, and when that broker died and left the cluster's metadata it may wait for
  ever (librdkafka issues 5456 and 5511; on Kafka 4.1 a stream task stalled that way for minutes after
  the node that was its group coordinator was SIGKILLed; the kill campaign of issue 38 saw the same
  after the node coordinating the thread's transactions died and came back). The call cannot be
  cancelled: it is left blocked on a daemon thread, and the owner replaces the producer (a new one
  with the same ``transactional.id`` fences this one and aborts its transaction).

A commit's calls (send-offsets, commit) are bounded well below the producer's ``transaction.timeout.ms``
(a third of it, at most ``TIMEOUT_S``): a commit given up after the coordinator already rolled the
transaction back on its timeout would fail fenced although no other producer took over.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from strom.errors import (
    BrokerUnavailableError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionStalledError,
)
from strom.kafka import clients
from strom.kafka.causes import causes, kafka_error
from strom.kafka.security import identity_of, refusal

__all__ = ["FENCED", "STALL_GRACE_S", "TIMEOUT_S", "Patience", "TransactionalProducer", "fenced",
           "send_timed_out"]

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0
"""How long init, send-offsets, commit and abort may take before the broker counts as unavailable."""
STALL_GRACE_S = 2.0
"""How long past its own timeout a librdkafka call may take before the producer counts as stalled (a
stalled producer is replaced; one that timed out is replaced too: a grace too short costs nothing)."""
SEND_OFFSETS_TIMEOUT_S = 5.0
"""How long a producer's first send-offsets may take (at most; ``commit_timeout_s`` if shorter): it finds
the group coordinator, which may be moving or loading its offsets. Given up, the transaction is aborted
and a stream thread opens its tasks again at once with a new producer (seconds), which finds the group
coordinator wherever it moved: a coordinator's move (its dead broker fenced after Kafka's 9 s
``broker.session.timeout.ms``, its offsets loaded elsewhere) costs no more than waiting for it would."""
KNOWN_COORDINATORS_TIMEOUT_S = 2.0
"""How long a later send-offsets may take: two round trips to coordinators the producer already found
(tens of milliseconds; 0.4 s at most in the kill campaign, 0.3 s at load 20-40 in the 32-partition
benchmark). librdkafka's stall (the module) hits exactly these calls: a coordinator it knows died and
came back (or left the metadata), so the call waits on it for ever; given up after 4 s instead of 7 s.
A call slow for another reason costs one reopening of the thread's tasks (about a second), and the new
producer's first call has ``SEND_OFFSETS_TIMEOUT_S`` again (both doubled by ``Patience``)."""
CALM_S = 30.0
"""How long send-offsets must go without being given up before ``Patience`` halves its bounds again."""
_MOST_DOUBLINGS = 4
"""``Patience`` doubles the bounds at most this often (2 s becomes 32 s: past any commit timeout)."""
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
_TRANSACTION_TIMEOUT_MS = 60_000
"""librdkafka's default ``transaction.timeout.ms``."""


def fenced(exc: BaseException | None, producer: TransactionalProducer | None = None) -> bool:
    """Whether ``exc``, or an exception it was raised from, says ``producer`` was fenced (its errors
    surface wrapped in a task's ProcessingError). librdkafka's ``produce`` names a fenced producer's
    fatal error only ``_FATAL``: then ``producer`` is asked (``is_fenced``)."""
    for cause in causes(exc):
        if isinstance(cause, ProducerFencedError):
            return True
        if (error := kafka_error(cause)) is not None:
            if error.code() in FENCED:
                return True
            if error.code() == KafkaError._FATAL and producer is not None:
                return producer.is_fenced()
    return False


def send_timed_out(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from, is a record's delivery that ran out of time
    (``message.timeout.ms``: librdkafka retried while a leader was unreachable or moving). Under
    exactly-once the transaction is then aborted and the tasks done again from their last commit, as
    Kafka Streams does on a retriable send error (``TaskCorruptedException``): never a failure."""
    return any((error := kafka_error(cause)) is not None and error.code() == KafkaError._MSG_TIMED_OUT
               for cause in causes(exc))


T = TypeVar("T")


def _group_of(group_metadata: Any) -> str:
    """The group id in librdkafka's serialized consumer group metadata (``CGMDv2:``, the generation as
    4 bytes, the group id up to a NUL), for a refusal's message only; "" if the layout is another."""
    magic = b"CGMDv2:"
    if not isinstance(group_metadata, bytes) or not group_metadata.startswith(magic):
        return ""
    return group_metadata[len(magic) + 4:].split(b"\0", 1)[0].decode(errors="replace")


def _refused_topic(error: KafkaError) -> str:
    """The topic librdkafka names in an offsets or delivery refusal (``topic((null))[0](Broker: ...)``)."""
    match = re.search(r"([\w.-]+)\(\(null\)\)\[\d+\]", error.str())
    return match.group(1) if match else ""


class Patience:
    """How many times the send-offsets bounds are doubled, shared by the successive producers of one
    ``transactional.id`` (a stream thread's slot): each send-offsets given up doubles them, each
    ``CALM_S`` without one halves them again. A coordinator answering slowly (a loaded machine, a
    transaction log still loading, the abort of the previous producer's transaction still being written)
    is not stalled: giving up on it as soon again only repeats the abort and the reopening. On a 2-core
    machine at load 40-170, stream threads with fixed bounds aborted nearly every transaction for
    minutes that way."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._doublings = 0
        self._since = clock()

    @property
    def doublings(self) -> int:
        calm_periods = int((self._clock() - self._since) // CALM_S)
        return max(0, self._doublings - calm_periods)

    def gave_up(self) -> None:
        self._doublings = min(self.doublings + 1, _MOST_DOUBLINGS)
        self._since = self._clock()

    def bound(self, seconds: float) -> float:
        return seconds * 2 ** self.doublings


class TransactionalProducer:
    """A confluent-kafka producer with ``transactional.id`` set; ``producer`` is the client itself, for
    ``produce``, ``poll`` and ``flush`` on the hot path. ``owner`` says what it writes for, in errors
    (e.g. "Stream task app-0_1")."""

    def __init__(self, bootstrap_servers: str, transactional_id: str, owner: str,
                 timeout_s: float = TIMEOUT_S, patient: bool = False, patience: Patience | None = None,
                 **overrides: Any) -> None:
        """``patient``: a stall fails the owner's Spark task (a micro-batch task's producer), so a
        send-offsets may take the whole commit timeout before it counts as stalled; a stream thread's
        producer must not pause its tasks long and gets the short bounds (the module), scaled by
        ``patience`` (the slot's, kept by its owner across producers; a fresh one if not given)."""
        self.transactional_id = transactional_id
        self.patient = patient
        self.patience = patience or Patience()
        self.owner = owner
        self.timeout_s = timeout_s
        transaction_timeout_s = float(overrides.get("transaction.timeout.ms", _TRANSACTION_TIMEOUT_MS)) / 1000
        self.commit_timeout_s = min(timeout_s, transaction_timeout_s / 3)
        """How long a commit may take: well below the transaction timeout (the module)."""
        self.in_transaction = False
        self.offsets_sent = False
        """A send-offsets returned: librdkafka knows the coordinators (``KNOWN_COORDINATORS_TIMEOUT_S``)."""
        self.stalled = False
        """A call never returned (see the module): the producer must be replaced."""
        self._bootstrap_servers = bootstrap_servers
        self._group = ""  # the group whose offsets the transaction commits, for a refusal's message
        self.producer: Producer = clients.producer(
            bootstrap_servers, **{**overrides, "transactional.id": transactional_id})

    def init_transactions(self) -> None:
        """Fences every earlier producer of this ``transactional.id`` and aborts its open transaction."""
        self.call(self.producer.init_transactions, self.timeout_s)

    def begin_transaction(self) -> None:
        self.producer.purged.clear()
        self.call(self.producer.begin_transaction)
        self.in_transaction = True

    def send_offsets_to_transaction(self, offsets: Sequence[TopicPartition], group_metadata: Any) -> None:
        """Adds ``offsets`` to the transaction; ``TransactionStalledError`` if librdkafka does not return
        in time (see the module)."""
        self._group = _group_of(group_metadata)
        try:
            self._bounded(self.producer.send_offsets_to_transaction, offsets, group_metadata,
                          self.send_offsets_timeout_s)
        except (TransactionStalledError, TransactionAbortableError):
            self.patience.gave_up()
            raise
        self.offsets_sent = True

    @property
    def send_offsets_timeout_s(self) -> float:
        if self.patient:
            return self.commit_timeout_s
        bound = KNOWN_COORDINATORS_TIMEOUT_S if self.offsets_sent else SEND_OFFSETS_TIMEOUT_S
        return min(self.commit_timeout_s, self.patience.bound(bound))

    def commit_transaction(self) -> None:
        self.call(self.producer.commit_transaction, self.commit_timeout_s)
        self.in_transaction = False

    def abort_transaction(self) -> None:
        """Aborts the open transaction, if there is one. A failure is logged, not raised: the next
        ``init_transactions`` of this ``transactional.id`` aborts the transaction anyway."""
        if not self.in_transaction:
            return
        self.in_transaction = False
        if self.stalled:  # librdkafka refuses any call while the stalled one is in progress
            return
        try:
            self.producer.abort_transaction(self.timeout_s)
        except KafkaException as exc:
            log.warning("%s: abort_transaction failed (%s); the next init_transactions of %s aborts it",
                        self.owner, exc, self.transactional_id)

    def is_fenced(self) -> bool:
        """After a fatal error: whether its cause is a fence. librdkafka's transactional calls report the
        original error of a producer in its fatal state (the call itself does nothing then)."""
        try:
            self.producer.abort_transaction(1)
        except KafkaException as exc:
            return exc.args[0].code() in FENCED
        return False

    def flush(self, timeout_s: float) -> int:
        """``producer.flush`` under this policy; the messages left unacknowledged."""
        return self.call(self.producer.flush, timeout_s)

    def _bounded(self, method: Callable[..., T], *args: Any) -> T:
        """``call(method, *args)`` on a daemon thread, waited its timeout (the last argument) plus
        ``STALL_GRACE_S`` at most."""
        name = getattr(method, "__name__", str(method))
        bound = args[-1] + STALL_GRACE_S
        if self.stalled:
            raise self._stalled_error(name, bound)
        outcome: list[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                outcome.append((True, self.call(method, *args)))
            except BaseException as exc:  # handed to the caller's thread
                outcome.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=run, name=f"strom-txn-{self.transactional_id}", daemon=True).start()
        if not done.wait(bound):
            self.stalled = True
            raise self._stalled_error(name, bound)
        returned, value = outcome[0]
        if not returned:
            raise value
        return value

    def _stalled_error(self, name: str, bound: float) -> TransactionStalledError:
        return TransactionStalledError(
            f"{self.owner}: librdkafka's {name} did not return in {bound:.0f}s "
            f"(a coordinator's broker died; librdkafka issues 5456, 5511). The producer of transactional.id "
            f"{self.transactional_id!r} is stuck: a new one fences it and aborts its transaction. Check the "
            f"brokers at {self._bootstrap_servers}.")

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``method(*args, **kwargs)`` under this producer's error policy (see the module)."""
        try:
            return method(*args, **kwargs)
        except SystemError as exc:  # a callback ran while librdkafka raised its fatal error
            if not isinstance(exc.__context__, KafkaException):
                raise
            return self._failed(method, exc.__context__)
        except KafkaException as exc:
            return self._failed(method, exc)

    def _failed(self, method: Callable[..., Any], exc: KafkaException) -> Any:
        error: KafkaError = exc.args[0]
        name = getattr(method, "__name__", str(method))
        if error.code() in FENCED:
            self.in_transaction = False
            raise ProducerFencedError(
                f"{self.owner} was fenced in {name}: another producer with transactional.id "
                f"{self.transactional_id!r} took over (a newer attempt of the same work).") from exc
        topic = _refused_topic(error) or ", ".join(sorted(self.producer.purged))
        # offsets sent into a transaction need Read on their topics (Kafka's TxnOffsetCommit), records Write
        operation = "Read" if name == "send_offsets_to_transaction" else "Write"
        refused = refusal(identity_of(self.producer), error, topic=topic, group=self._group,
                          transactional_id=self.transactional_id, topic_operation=operation)
        if refused is not None:  # no retry can help: the transaction is aborted, the refusal raised
            self.abort_transaction()
            raise refused from None
        if self.in_transaction and (error.txn_requires_abort() or error.retriable()):
            self.abort_transaction()
            raise TransactionAbortableError(
                f"{self.owner}: {name} failed with {error.str()}; the transaction was aborted. Check the "
                f"broker at {self._bootstrap_servers} if this repeats.") from exc
        raise BrokerUnavailableError(f"{self.owner} failed in {name}: {error.str()}. Check the broker at "
                                     f"{self._bootstrap_servers}.") from exc
