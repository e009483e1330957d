"""The options every broker-facing command shares (``-b``, ``-X``, ``--command-config``) and the
clients built from them: one place decides how the CLI reaches a cluster, secured or not."""

from __future__ import annotations

import difflib
import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic, TopicMetadata

from strom.cli.broker import parse_config
from strom.errors import BrokerUnavailableError, StromError, UnknownTopicError
from strom.kafka import clients
from strom.kafka.schema_registry import is_serde_setting
from strom.kafka.security import AUTHENTICATION_CODES, authentication_error

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
TIMEOUT = 15.0
"""Seconds a request may take once a broker answered."""
_PROBE = 0.5
FATAL_CODES = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION, KafkaError._SSL,
                         KafkaError._RESOLVE, KafkaError.SASL_AUTHENTICATION_FAILED,
                         KafkaError._INVALID_ARG, KafkaError._FATAL})
"""Errors after which waiting longer for the cluster cannot help."""


@dataclass
class Connection:
    """Where the cluster is and the librdkafka properties to reach it (``-X``, ``--command-config``).

    The user's properties override every default a command sets, as kcat's ``-X`` does."""

    bootstrap_servers: str
    properties: dict[str, str] = field(default_factory=dict)
    serde_properties: dict[str, str] = field(default_factory=dict)
    """The Schema Registry serdes' settings given with ``-X`` (``schema.registry.url``, ...): they go to
    ``--value-deserializer avro`` and the like, not to librdkafka."""
    errors: list[KafkaError] = field(default_factory=list)
    _admin: AdminClient | None = field(default=None, init=False, repr=False)

    def _settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {**settings, **self.properties, "error_cb": self.errors.append}

    def consumer(self, group: str | None = None, **settings: Any) -> Consumer:
        return clients.consumer(self.bootstrap_servers, group, **self._settings(settings))

    def producer(self, **settings: Any) -> Producer:
        return clients.producer(self.bootstrap_servers, **self._settings(settings))

    def create_topics(self, topics: Mapping[str, int]) -> None:
        clients.create_topics(self.bootstrap_servers, topics, settings=self._settings({}))

    def streams_config(self) -> dict[str, Any]:
        """The connection as a Kafka Streams application's settings: security keys as they are (every
        client of the application takes them), each other property for its producers, consumers and
        admin client."""
        shared = {k: v for k, v in self.properties.items()
                  if k == "security.protocol" or k.startswith(("ssl.", "sasl."))}
        per_client = {f"{role}.{k}": v for role in ("producer", "consumer", "admin")
                      for k, v in self.properties.items() if k not in shared}
        return {"bootstrap.servers": self.bootstrap_servers, **shared, **per_client}

    def admin(self) -> AdminClient:
        """The command's admin client, after checking that the cluster answers (fails fast if not)."""
        if self._admin is None:
            self._admin = clients.admin(self.bootstrap_servers, **self._settings({}))
            self.metadata()
        return self._admin

    def metadata(self) -> ClusterMetadata:
        """Every topic's metadata (asking for one topic would let the broker auto-create it)."""
        admin = self.admin()
        deadline = time.monotonic() + TIMEOUT
        first_error = len(self.errors)
        while True:
            try:
                return admin.list_topics(timeout=_PROBE)
            except KafkaException as exc:
                admin.poll(0)
                self._raise_if_unreachable(self.errors[first_error:], time.monotonic() > deadline, exc)

    def _raise_if_unreachable(self, errors: list[KafkaError], force: bool, cause: Exception) -> None:
        """Raises BrokerUnavailableError once librdkafka reported that no broker can be reached (or
        ``force``), naming librdkafka's reason, instead of letting it retry and log for ever."""
        fatal = [e for e in errors if e.code() in FATAL_CODES]
        if not fatal and not force:
            return
        reasons = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN] or fatal
        reason = reasons[0].str() if reasons else str(cause)
        if any(e.code() in AUTHENTICATION_CODES or "certificate verify failed" in e.str() for e in reasons):
            raise authentication_error(self.properties, self.bootstrap_servers, reason)
        raise BrokerUnavailableError(
            f"No broker reachable at {self.bootstrap_servers} ({reason}). Start one with `strom broker`, or "
            "pass -b/--bootstrap-servers (and -X or --command-config for a secured cluster).")

    def topic(self, name: str, create: bool = False, offers_create: bool = False,
              needs: str = "Describe") -> TopicMetadata:
        """The topic's metadata; a missing topic is an error naming the closest existing one (and
        ``--create-topic`` if the command ``offers_create``), unless ``create`` (then it is created with
        the broker's default partition count). A topic hidden from this principal is said to be refused
        with the operation the command ``needs`` on it (Write, Read, ... each implies Describe)."""
        topics = self.metadata().topics
        found = topics.get(name)
        if found is not None and found.error is None:
            return found
        if not create:
            clients.check_described(self.admin(), [name], self.properties, needs)
            raise unknown_topic(name, topics, offers_create)
        future = self.admin().create_topics([NewTopic(name, -1)], request_timeout=TIMEOUT)[name]
        try:
            future.result(TIMEOUT)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise StromError(f"Could not create topic {name!r}: {exc.args[0].str()}") from exc
        return self.wait_listed(name)

    def wait_listed(self, name: str) -> TopicMetadata:
        """The metadata of a topic just created, once every broker lists it: on a cluster of several
        brokers the others learn of a new topic a moment after the controller created it, and the next
        command may ask any of them."""
        self._wait_every_broker([name], listed=True)
        return self.metadata().topics[name]

    def wait_unlisted(self, names: list[str]) -> None:
        """Returns once no broker lists the topics just deleted: a command (or an application's start)
        that follows must not find a topic the controller already removed."""
        self._wait_every_broker(names, listed=False)

    def _wait_every_broker(self, names: list[str], listed: bool) -> None:
        if not names:
            return
        deadline = time.monotonic() + TIMEOUT
        for broker in self.metadata().brokers.values():
            address = f"{broker.host}:{broker.port}"
            admin = clients.admin(address, **self._settings({}))
            while pending := _differing(admin.list_topics(timeout=TIMEOUT), names, listed):
                if time.monotonic() > deadline:
                    done = "created" if listed else "deleted"
                    shown = "does not list" if listed else "still lists"
                    raise StromError(f"Topic {pending[0]!r} was {done} but the broker at {address} {shown} "
                                     "it yet; try again.")
                time.sleep(0.1)


def _differing(cluster: ClusterMetadata, names: list[str], listed: bool) -> list[str]:
    """The topics of ``names`` that ``cluster`` does not yet list (``listed``) or still lists."""
    return [n for n in names
            if (cluster.topics.get(n) is not None and cluster.topics[n].error is None) != listed]


def unknown_topic(name: str, existing: dict[str, Any], offers_create: bool = False) -> UnknownTopicError:
    hint = difflib.get_close_matches(name, [t for t in existing if not t.startswith("__")], n=1)
    suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
    flag = "pass --create-topic, or " if offers_create else ""
    return UnknownTopicError(f"Topic {name!r} does not exist.{suggestion} See `strom topics list`; to create "
                             f"it, {flag}run `strom topics create`.")


def connection_options(command: Callable[..., Any] | None = None, *,
                       default: str = DEFAULT_BOOTSTRAP, schema_registry: bool = False) -> Any:
    """Adds ``-b/--bootstrap-servers``, ``-X key=value`` and ``--command-config FILE`` to a command,
    which receives them as one ``connection: Connection`` argument. ``default=""`` is for a command
    that starts its own broker when no cluster is named (``strom demo``); ``schema_registry`` for one
    whose formats take Schema Registry settings (its ``-X`` help says so)."""
    if command is None:
        return functools.partial(connection_options, default=default, schema_registry=schema_registry)

    @functools.wraps(command)
    def with_connection(*args: Any, bootstrap_servers: str | None, client_properties: dict[str, str],
                        command_config: Path | None, **kwargs: Any) -> Any:
        properties = clients.load_properties(command_config) if command_config else {}
        properties.update(client_properties)
        bootstrap = (bootstrap_servers or properties.pop("bootstrap.servers", None) or default)
        properties.pop("bootstrap.servers", None)
        serde = {key: properties.pop(key) for key in list(properties) if is_serde_setting(key)}
        return command(*args, connection=Connection(bootstrap, properties, serde), **kwargs)

    default_help = default or "an embedded broker this command starts"
    options = (
        click.option("-b", "--bootstrap-servers", envvar="STROM_BOOTSTRAP_SERVERS", default=None,
                     help=f"Kafka bootstrap servers (env STROM_BOOTSTRAP_SERVERS; default {default_help})."),
        click.option("-X", "client_properties", multiple=True, callback=parse_config, metavar="KEY=VALUE",
                     help="librdkafka client property (security, acks, sizes...); repeatable, wins over "
                          "--command-config." + (_SCHEMA_REGISTRY_HELP if schema_registry else "")),
        click.option("--command-config", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Java-style .properties file of client settings (as Kafka's tools take)."),
    )
    for option in reversed(options):
        with_connection = option(with_connection)
    return with_connection


_SCHEMA_REGISTRY_HELP = (" Schema Registry settings (schema.registry.url, schema.registry.*, basic.auth.*, "
                         "auto.register.schemas, use.latest.version, *subject.name.strategy) go to the "
                         "avro/json_schema/protobuf formats.")

create_topic_option = click.option(
    "--create-topic", is_flag=True, help="Create the topic (broker's default partition count) if missing.")


def raw_argument(text: str) -> bytes:
    """A command-line argument as the bytes the user typed (non-UTF-8 bytes survive the round trip)."""
    return os.fsencode(text)
