"""Broker and topic configuration, with Kafka's key names, defaults and units.

Topic configs fall back to the broker's `log.*` defaults exactly as in Kafka (``retention.ms`` to
``log.retention.ms`` and so on). Unknown keys and bad values raise ConfigError at start-up; over
the wire they are answered with INVALID_CONFIG.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strom.broker.security.jaas import check_login_module, parse_jaas
from strom.broker.security.listeners import DEFAULT_PROTOCOL_MAP, parse_endpoints, parse_protocol_map
from strom.errors import ConfigError

LONG_MAX = 2**63 - 1
# One application on one machine: a new group need not wait for more members (EmbeddedBroker and
# `strom broker` run by hand; Kafka's 3000 ms suits clusters where many consumers start together).
LOCAL_DEFAULTS = {"group.initial.rebalance.delay.ms": "0"}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Kafka's authorizer names, so one server.properties serves both; both mean strom's ACL authorizer.
AUTHORIZERS = ("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
               "kafka.security.authorizer.AclAuthorizer")
SENSITIVE_KEYS = frozenset({"ssl.key.password", "sasl.jaas.config"})
"""Never logged, quoted in an error nor described (DescribeConfigs says null)."""


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("true or false")
    return text == "true"


def _int(low: int = 0, high: int = LONG_MAX, allow_minus_one: bool = False) -> Callable[[Any], int]:
    """A parser of integers in [low, high] (and -1 if allowed); its ValueError says what is wanted."""
    wanted = f"an integer >= {low}" if high == LONG_MAX else f"an integer in [{low}, {high}]"
    if allow_minus_one:
        wanted += " (or -1)"

    def parse(value: Any) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ValueError(wanted) from None
        if not (low <= number <= high or (allow_minus_one and number == -1)):
            raise ValueError(wanted)
        return number
    return parse


def _ratio(value: Any) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise ValueError("a number in [0, 1]")
    return number


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip()
        if text not in choices:
            raise ValueError(f"one of {', '.join(choices)}")
        return text
    return parse


def _cleanup_policy(value: Any) -> str:
    # the order given is kept, as Kafka keeps it ("delete,compact" after appending compact)
    parts = list(dict.fromkeys(p.strip() for p in str(value).split(",") if p.strip()))
    if not parts or any(p not in ("compact", "delete") for p in parts):
        raise ValueError("delete, compact or compact,delete")
    return ",".join(parts)


def _endpoints(value: Any) -> str:
    parse_endpoints(value)
    return str(value).strip()


def _protocol_map(value: Any) -> str:
    parse_protocol_map(value)
    return str(value).strip()


def _pem_only(value: Any) -> str:
    text = str(value).strip().upper()
    if text != "PEM":
        raise ValueError("PEM (strom reads PEM files; convert a JKS or PKCS12 store with openssl or keytool)")
    return text


def _mechanisms(value: Any) -> str:
    names = [m.strip().upper() for m in str(value).split(",") if m.strip()]
    if any(m not in SASL_MECHANISMS for m in names):
        raise ValueError(f"a comma-separated list of {', '.join(SASL_MECHANISMS)}")
    return ",".join(names)


def _authorizer(value: Any) -> str:
    text = str(value).strip()
    if text not in AUTHORIZERS:
        raise ValueError("empty (no authorizer) or org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    return text


def _jwks_url(value: Any) -> str:
    text = str(value).strip()
    if text and urllib.parse.urlsplit(text).scheme.lower() not in ("http", "https", "file"):
        raise ValueError("an http://, https:// or file: URL (as Kafka takes)")
    return text


OAUTHBEARER_HANDLERS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                        "org.apache.kafka.common.security.oauthbearer."
                        "OAuthBearerUnsecuredValidatorCallbackHandler")


def _oauthbearer_handler(value: Any) -> str:
    text = str(value).strip()
    if text and text not in OAUTHBEARER_HANDLERS:
        raise ValueError(f"empty or one of {', '.join(OAUTHBEARER_HANDLERS)} (strom's two validators)")
    return text


@dataclass(frozen=True, slots=True)
class Spec:
    parse: Callable[[Any], Any]
    default: Any
    doc: str


BROKER_SPECS: dict[str, Spec] = {
    "node.id": Spec(_int(), 0, "id of this broker in metadata responses"),
    "listeners": Spec(_endpoints, "",
                      "NAME://host:port,... to listen on (empty: PLAINTEXT on --host/--port)"),
    "listener.security.protocol.map": Spec(_protocol_map, DEFAULT_PROTOCOL_MAP,
                                           "NAME:PROTOCOL,... the security protocol of each listener"),
    "advertised.listeners": Spec(_endpoints, "", "NAME://host:port,... clients are told to connect to"),
    "ssl.keystore.type": Spec(_pem_only, "PEM", "format of ssl.keystore.location (PEM only)"),
    "ssl.keystore.location": Spec(str, "",
                                  "PEM file with the private key and certificate chain of TLS listeners"),
    "ssl.key.password": Spec(str, "", "password of the private key in ssl.keystore.location, if encrypted"),
    "ssl.truststore.type": Spec(_pem_only, "PEM", "format of ssl.truststore.location (PEM only)"),
    "ssl.truststore.location": Spec(str, "", "PEM file of the CAs whose client certificates are trusted"),
    "ssl.client.auth": Spec(_choice("none", "requested", "required"), "none",
                            "ask TLS clients for a certificate (required: mutual TLS)"),
    "ssl.allow.dn.changes": Spec(_bool, False, "accept a keystore set at run time whose certificate has "
                                 "another subject than the one in use"),
    "ssl.allow.san.changes": Spec(_bool, False, "accept a keystore set at run time whose certificate "
                                  "lacks a subject alternative name of the one in use"),
    "sasl.enabled.mechanisms": Spec(_mechanisms, "SCRAM-SHA-256,SCRAM-SHA-512",
                                    "SASL mechanisms offered on SASL listeners"),
    "sasl.oauthbearer.jwks.endpoint.url": Spec(
        _jwks_url, "", "http(s):// or file: URL of the JWKS signing OAUTHBEARER tokens (empty: unsecured)"),
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": Spec(_int(1), 3_600_000,
                                                      "how often the JWKS is fetched again"),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": Spec(
        _int(), 100, "first wait before a failed JWKS fetch is tried again (doubling each time)"),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": Spec(
        _int(), 10_000, "how long a JWKS fetch keeps trying before it gives up"),
    "sasl.server.callback.handler.class": Spec(
        _oauthbearer_handler, "", "OAUTHBEARER's validator: Kafka's OAuthBearerValidatorCallbackHandler "
        "(signed tokens) or OAuthBearerUnsecuredValidatorCallbackHandler (empty: signed if a JWKS is set)"),
    "sasl.oauthbearer.expected.audience": Spec(str, "",
                                               "audiences ('aud') a signed token must name, ','-separated"),
    "sasl.oauthbearer.expected.issuer": Spec(str, "", "issuer ('iss') a signed token must name (empty: any)"),
    "sasl.oauthbearer.clock.skew.seconds": Spec(_int(), 30, "clock difference allowed checking exp and nbf"),
    "sasl.oauthbearer.sub.claim.name": Spec(str, "sub", "claim of a signed token naming its principal"),
    "sasl.oauthbearer.scope.claim.name": Spec(str, "scope", "claim of a signed token listing its scopes"),
    "authorizer.class.name": Spec(_authorizer, "",
                                  "enable the ACL authorizer (Kafka's StandardAuthorizer name)"),
    "super.users": Spec(str, "", "principals allowed everything, ';'-separated (User:admin;User:CN=ops)"),
    "allow.everyone.if.no.acl.found": Spec(_bool, False, "allow access to resources no ACL names"),
    "num.partitions": Spec(_int(1, 100_000), 1, "partitions of auto-created topics"),
    "auto.create.topics.enable": Spec(_bool, True, "create unknown topics on metadata/produce"),
    "log.segment.bytes": Spec(_int(1024), 1 << 30, "roll a segment at this size"),
    "log.roll.ms": Spec(_int(1), 7 * 24 * 3600 * 1000, "roll a segment at this age"),
    "log.retention.ms": Spec(_int(allow_minus_one=True), 7 * 24 * 3600 * 1000, "delete older segments"),
    "log.retention.bytes": Spec(_int(allow_minus_one=True), -1, "delete segments beyond this size"),
    "log.retention.check.interval.ms": Spec(_int(1), 300_000, "how often retention and cleaning run"),
    "log.flush.interval.messages": Spec(_int(1), LONG_MAX, "fsync after this many messages"),
    "log.flush.interval.ms": Spec(_int(1, allow_minus_one=True), -1,
                                  "fsync at this interval (-1: only at a segment roll and at shutdown)"),
    "log.cleanup.policy": Spec(_cleanup_policy, "delete", "default cleanup.policy"),
    "log.cleaner.delete.retention.ms": Spec(_int(), 24 * 3600 * 1000, "default delete.retention.ms"),
    "log.cleaner.min.compaction.lag.ms": Spec(_int(), 0, "default min.compaction.lag.ms"),
    "log.cleaner.backoff.ms": Spec(_int(1), 15_000, "how often the log cleaner looks for work"),
    "log.message.timestamp.type": Spec(_choice("CreateTime", "LogAppendTime"), "CreateTime",
                                       "default message.timestamp.type"),
    "message.max.bytes": Spec(_int(64), 1_048_588, "largest record batch accepted"),
    "fetch.max.bytes": Spec(_int(1024), 57_671_680, "largest Fetch response (a client may ask for less)"),
    "socket.request.max.bytes": Spec(_int(1024), 104_857_600, "largest request frame accepted"),
    "socket.receive.buffer.bytes": Spec(_int(1, 2**31 - 1, allow_minus_one=True), 102_400,
                                        "SO_RCVBUF of client connections (-1: the OS's, autotuned)"),
    "socket.send.buffer.bytes": Spec(_int(1, 2**31 - 1, allow_minus_one=True), 102_400,
                                     "SO_SNDBUF of client connections (-1: the OS's, autotuned)"),
    "max.connections": Spec(_int(1), 1000,
                            "connections served at once; at the limit the longest-idle one makes room"),
    "max.connections.per.ip": Spec(_int(1, 2**31 - 1), 2**31 - 1, "connections from one address at once"),
    "connections.max.idle.ms": Spec(_int(1), 600_000, "close connections idle for this long"),
    "connections.max.reauth.ms": Spec(_int(), 0, "a SASL session lasts at most this long unless the client "
                                      "re-authenticates (KIP-368; 0: only an OAUTHBEARER token's expiry)"),
    "queued.max.request.bytes": Spec(_int(1024), 256 << 20,
                                     "request bytes held in memory at once over all connections"),
    "group.initial.rebalance.delay.ms": Spec(_int(), 3000, "wait for more members of a new group "
                                             "(0 for `strom broker` and EmbeddedBroker: LOCAL_DEFAULTS)"),
    "group.min.session.timeout.ms": Spec(_int(1), 6000, "smallest session.timeout.ms accepted"),
    "group.max.session.timeout.ms": Spec(_int(1), 1_800_000, "largest session.timeout.ms accepted"),
    "offsets.retention.minutes": Spec(_int(1), 10080, "expire committed offsets of empty groups"),
    "offsets.retention.check.interval.ms": Spec(_int(1), 600_000, "how often offsets expire"),
    "offsets.topic.num.partitions": Spec(_int(1, 1000), 1, "partitions of __consumer_offsets"),
    "offsets.topic.segment.bytes": Spec(_int(1024), 100 << 20, "segment size of __consumer_offsets"),
    "transaction.max.timeout.ms": Spec(_int(1), 900_000, "largest transaction.timeout.ms accepted"),
    "transaction.state.log.num.partitions": Spec(_int(1, 1000), 1, "partitions of __transaction_state"),
    "transactional.id.expiration.ms": Spec(_int(1), 604_800_000, "forget idle transactional ids"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": Spec(
        _int(1), 10_000, "how often timed-out transactions are aborted"),
    "producer.id.expiration.ms": Spec(_int(1), 86_400_000, "forget idle idempotent producers"),
}

LISTENER_PREFIX = "listener.name."
SSL_KEYS = frozenset(key for key in BROKER_SPECS if key.startswith("ssl."))
LISTENER_KEYS = frozenset({"sasl.enabled.mechanisms", "connections.max.reauth.ms", *SSL_KEYS,
                           *(key for key in BROKER_SPECS if key.startswith("sasl.oauthbearer."))})
"""The broker configs one listener may override, as in Kafka: ``listener.name.<listener>.<key>``."""
LISTENER_ONLY_SPECS = {"sasl.jaas.config": Spec(
    parse_jaas, None, "a SASL mechanism's JAAS login module and options on one listener (Kafka's form)")}
"""Configs Kafka's brokers take only per listener and mechanism (no broker-wide value)."""
MECHANISM_KEYS = {name.lower(): frozenset({"connections.max.reauth.ms", "sasl.jaas.config"})
                  for name in SASL_MECHANISMS}
MECHANISM_KEYS["oauthbearer"] |= LISTENER_KEYS - {"sasl.enabled.mechanisms"} - SSL_KEYS | {
    "sasl.server.callback.handler.class"}
"""...and those one SASL mechanism on a listener may override further:
``listener.name.<listener>.<mechanism>.<key>`` (``listener.name.oauth.oauthbearer.sasl.oauthbearer.
jwks.endpoint.url``, ``listener.name.sasl_ssl.plain.sasl.jaas.config``)."""


KAFKA_MECHANISM_KEYS = frozenset({"sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                                  "sasl.server.callback.handler.class", "connections.max.reauth.ms"})
"""The keys Kafka knows as a SASL mechanism's own on a listener: DescribeConfigs types a
``listener.name.<listener>.<mechanism>.<key>`` by ``<key>`` only for these."""


def _described_value(mechanism: str, name: str, value: Any) -> str | None:
    """A ``listener.name.*`` key's value as Kafka's DescribeConfigs shows it, None where Kafka hides it:
    a password, or a key whose type it cannot tell (it takes ``<mechanism>.<key>`` for the broker key of
    any mechanism key but its own few, and hides what it does not know)."""
    known = not mechanism or name in KAFKA_MECHANISM_KEYS
    return None if name in SENSITIVE_KEYS or not known else render(value)


def _listener_override(key: str) -> tuple[str, str, str]:
    """(listener, mechanism or "", broker key) of a ``listener.name.*`` key; KeyError if it overrides
    nothing strom serves per listener."""
    listener, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    if rest in LISTENER_KEYS:
        return listener.upper(), "", rest
    mechanism, _, inner = rest.partition(".")
    if listener and inner in MECHANISM_KEYS.get(mechanism.lower(), ()):
        return listener.upper(), mechanism.lower(), inner
    raise KeyError(key)


# topic key -> (parser, broker key supplying the default or None, own default)
TOPIC_SPECS: dict[str, tuple[Callable[[Any], Any], str | None, Any]] = {
    "cleanup.policy": (_cleanup_policy, "log.cleanup.policy", None),
    "retention.ms": (_int(allow_minus_one=True), "log.retention.ms", None),
    "retention.bytes": (_int(allow_minus_one=True), "log.retention.bytes", None),
    "segment.bytes": (_int(1024), "log.segment.bytes", None),
    "segment.ms": (_int(1), "log.roll.ms", None),
    "delete.retention.ms": (_int(), "log.cleaner.delete.retention.ms", None),
    "min.compaction.lag.ms": (_int(), "log.cleaner.min.compaction.lag.ms", None),
    "max.compaction.lag.ms": (_int(1), None, LONG_MAX),
    "min.cleanable.dirty.ratio": (_ratio, None, 0.5),
    "max.message.bytes": (_int(64), "message.max.bytes", None),
    "flush.messages": (_int(1), "log.flush.interval.messages", None),
    "flush.ms": (_int(1, allow_minus_one=True), "log.flush.interval.ms", None),
    "message.timestamp.type": (_choice("CreateTime", "LogAppendTime"), "log.message.timestamp.type", None),
    "compression.type": (_choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), None,
                         "producer"),
    "min.insync.replicas": (_int(1, 1), None, 1),
}


DYNAMIC_BROKER_KEYS = frozenset({broker_key for _, broker_key, _ in TOPIC_SPECS.values() if broker_key}
                                | {"max.connections", "max.connections.per.ip"})
"""The broker configs Kafka changes at run time (IncrementalAlterConfigs on a BROKER resource) that strom
serves: the topic defaults (read at each use) and the connection limits."""
RELOADABLE_SSL_KEYS = frozenset({"ssl.keystore.type", "ssl.keystore.location", "ssl.key.password",
                                 "ssl.truststore.type", "ssl.truststore.location"})
"""...and the TLS files of a listener, changed only per listener and per broker as in Kafka
(``listener.name.<listener>.ssl.keystore.location`` on this broker's resource): a certificate rotated
without a restart."""
PER_BROKER, CLUSTER_DEFAULT = "broker", "cluster-default"
"""Kafka's two layers of dynamic broker configs: this broker's (resource name = its node id) over the
cluster-wide default (resource name empty), both over the static config."""
STATIC, DEFAULT = "static", "default"
"""...and the two below them: the configs the broker was started with, and the defaults."""

KAFKA_BROKER_SYNONYMS = {
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
}
"""Kafka's other names of a broker config, in precedence order (DescribeConfigs lists them as synonyms)."""
PER_TOPIC_IN_STROM = {"max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
                      "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
                      "compression.type": "compression.type", "min.insync.replicas": "min.insync.replicas"}
"""Topic configs whose broker-wide default Kafka takes and strom does not, with that broker config."""
TOPIC_SYNONYM = {key: broker_key or PER_TOPIC_IN_STROM[key]
                 for key, (_, broker_key, _) in TOPIC_SPECS.items()}
"""The broker config of each topic config in Kafka (the first of its synonyms)."""
KAFKA_DEFAULTS: dict[str, Any] = {"log.retention.hours": 168, "log.roll.hours": 168, **{
    broker_key: TOPIC_SPECS[key][2] for key, broker_key in PER_TOPIC_IN_STROM.items()}}
"""Defaults of broker configs Kafka has and strom does not take: the hours that Kafka's log.retention.ms
and log.roll.ms fall back to (they have no default of their own), and those of PER_TOPIC_IN_STROM."""


@dataclass(frozen=True, slots=True)
class Synonym:
    """One place a config's value is set (DescribeConfigs' synonyms): its name there, value (None if
    secret) and layer (the topic's own, PER_BROKER, CLUSTER_DEFAULT, STATIC or DEFAULT)."""

    name: str
    value: str | None
    layer: str


_DEFAULTS = {**{key: spec.default for key, spec in BROKER_SPECS.items()
                if spec.default != "" and key not in KAFKA_BROKER_SYNONYMS}, **KAFKA_DEFAULTS}
"""The defaults as Kafka lists them: without the keys that have none (strom's empty ones)."""


def synonym_names(name: str) -> Sequence[str]:
    """The names config ``name`` is known by, in Kafka's order of precedence."""
    if not name.startswith(LISTENER_PREFIX):
        return KAFKA_BROKER_SYNONYMS.get(name, (name,))
    _, mechanism, key = _listener_override(name)
    return (name, key) if not mechanism or key in KAFKA_MECHANISM_KEYS else (name,)


def _dynamic_name(key: str, layer: str) -> str:
    """The broker config a dynamic ``key`` sets; NotDynamicError with Kafka's words if it cannot be set at
    run time in ``layer``."""
    if key.startswith(LISTENER_PREFIX):
        try:
            _, mechanism, name = _listener_override(key)
        except KeyError:
            mechanism, name = "", key
        if mechanism or name not in RELOADABLE_SSL_KEYS:
            raise NotDynamicError(f"Cannot update these configs dynamically: Set({key}) (of a listener's "
                                  f"keys, only {', '.join(sorted(RELOADABLE_SSL_KEYS))} change at run time)")
        if layer != PER_BROKER:
            raise NotDynamicError(f"Cannot update these configs at default cluster level, broker id must be "
                                  f"specified: Set({key})")
        return name
    if key in RELOADABLE_SSL_KEYS:
        raise NotDynamicError(f"These security configs can be dynamically updated only per-listener using "
                              f"the listener prefix: Set({key}) (set listener.name.<listener>.{key})")
    if key not in DYNAMIC_BROKER_KEYS:
        raise NotDynamicError(f"Cannot update these configs dynamically: Set({key}) (restart the broker "
                              "with --config key=value)")
    return key


def _listener_key(key: str) -> str:
    """A ``listener.name.<listener>.<key>`` key with the listener's name in lower case, as stored."""
    listener, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    return f"{LISTENER_PREFIX}{listener.lower()}.{rest}"


def is_sensitive(name: str) -> bool:
    """Whether DescribeConfigs hides the value of config ``name`` (a secret, or a listener key Kafka cannot
    type)."""
    if name.startswith(LISTENER_PREFIX):
        _, mechanism, key = _listener_override(name)
        return _described_value(mechanism, key, "") is None
    return name in SENSITIVE_KEYS


class NotDynamicError(ValueError):
    """A broker config that cannot change while the broker runs (Kafka answers INVALID_REQUEST)."""


class BrokerConfig:
    """Validated broker configuration; unknown keys raise ConfigError naming the closest key. Dynamic
    configs (``set_dynamic``) take precedence over the static ones, this broker's over the cluster's."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self._values = {key: spec.default for key, spec in BROKER_SPECS.items()}
        self.dynamic: dict[str, dict[str, Any]] = {PER_BROKER: {}, CLUSTER_DEFAULT: {}}
        self.per_listener: dict[tuple[str, str], dict[str, Any]] = {}  # (LISTENER, mechanism) -> key -> value
        self.static_listener_keys: dict[str, str | None] = {}
        """The ``listener.name.*`` keys as given, with their values as DescribeConfigs shows them."""
        self._static: dict[str, Any] = {}  # the broker keys given
        for key, value in (overrides or {}).items():
            layer, name, mechanism = self._values, key, ""
            if key.startswith(LISTENER_PREFIX):
                try:
                    listener, mechanism, name = _listener_override(key)
                except KeyError:
                    raise ConfigError(
                        f"Unknown configuration key {key!r}: strom broker takes listener.name.<listener>."
                        f"<key> for {', '.join(sorted(LISTENER_KEYS))}, and listener.name.<listener>."
                        "<mechanism>.<key> for connections.max.reauth.ms and sasl.jaas.config, and for "
                        "OAUTHBEARER's sasl.oauthbearer.* and sasl.server.callback.handler.class "
                        "(docs/broker.md)."
                    ) from None
                layer = self.per_listener.setdefault((listener, mechanism), {})
            elif key not in BROKER_SPECS:
                raise ConfigError.unknown_key(key, list(BROKER_SPECS))
            try:
                layer[name] = (BROKER_SPECS.get(name) or LISTENER_ONLY_SPECS[name]).parse(value)
                if name == "sasl.jaas.config":
                    check_login_module(layer[name], mechanism)
                if layer is self._values:
                    self._static[key] = layer[name]
                else:
                    self.static_listener_keys[key] = _described_value(mechanism, name, value)
            except (TypeError, ValueError) as exc:
                if name in SENSITIVE_KEYS:
                    raise ConfigError(f"Invalid value for configuration {key!r} (not shown: it holds "
                                      f"secrets): expected {exc}.") from None
                raise ConfigError.bad_value(key, value, str(exc)) from exc

    def __getitem__(self, key: str) -> Any:
        for layer in (self.dynamic[PER_BROKER], self.dynamic[CLUSTER_DEFAULT]):
            if key in layer:
                return layer[key]
        return self._values[key]

    def listener(self, name: str, mechanism: str = "") -> ListenerConfig:
        """The configs listener ``name`` (and SASL ``mechanism`` on it) works with."""
        return ListenerConfig(self, name.upper(), mechanism.lower())

    def set_dynamic(self, layer: str, configs: Mapping[str, Any]) -> None:
        """Replaces one layer's dynamic configs; NotDynamicError (INVALID_REQUEST) for a key Kafka does not
        change at run time (or not in this layer), ValueError (INVALID_CONFIG) for a bad value, and nothing
        changes."""
        parsed = {}
        for key, value in configs.items():
            name = _dynamic_name(key, layer)
            try:
                stored = _listener_key(key) if key.startswith(LISTENER_PREFIX) else key
                parsed[stored] = BROKER_SPECS[name].parse(value)
            except (TypeError, ValueError) as exc:
                shown = "(not shown: it holds secrets)" if name in SENSITIVE_KEYS else repr(value)
                raise ValueError(f"Invalid value {shown} for broker config {key!r}: expected {exc}.") from exc
        self.dynamic[layer] = parsed

    def synonyms(self, name: str) -> list[Synonym]:
        """Where config ``name`` is set, as Kafka's DescribeConfigs lists its synonyms: each of its names
        (KAFKA_BROKER_SYNONYMS; a ``listener.name.*`` key, then the key it overrides) in each layer, this
        broker's dynamic configs first and the defaults last, from the first entry named ``name`` on."""
        names = synonym_names(name)
        hidden = is_sensitive(name)
        found = [Synonym(n, None if hidden or values[n] is None else render(values[n]), layer)
                 for layer, values in self._layers() for n in names if n in values]
        first = next((i for i, synonym in enumerate(found) if synonym.name == name), len(found))
        return found[first:]

    def _layers(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        yield PER_BROKER, self.dynamic[PER_BROKER]
        yield CLUSTER_DEFAULT, self.dynamic[CLUSTER_DEFAULT]
        yield STATIC, {**self._static, **self.static_listener_keys}
        yield DEFAULT, _DEFAULTS

    def topic_defaults(self) -> dict[str, Any]:
        return {key: self[broker_key] if broker_key else default
                for key, (_, broker_key, default) in TOPIC_SPECS.items()}


class ListenerConfig:
    """The configs one listener sees, resolved as Kafka resolves them: ``listener.name.<listener>.
    <mechanism>.<key>`` over ``listener.name.<listener>.<key>`` over the broker's ``<key>``."""

    def __init__(self, config: BrokerConfig, listener: str, mechanism: str) -> None:
        self.config, self.listener, self.mechanism = config, listener, mechanism

    def __getitem__(self, key: str) -> Any:
        dynamic = self.config.dynamic[PER_BROKER]
        if self.key(key) in dynamic:
            return dynamic[self.key(key)]
        for mechanism in dict.fromkeys((self.mechanism, "")):
            layer = self.config.per_listener.get((self.listener, mechanism), {})
            if key in layer:
                return layer[key]
        if key in LISTENER_ONLY_SPECS:
            return LISTENER_ONLY_SPECS[key].default
        return self.config[key]

    def key(self, key: str) -> str:
        """``key`` of this listener: ``listener.name.<listener>.<key>``."""
        return f"{LISTENER_PREFIX}{self.listener.lower()}.{key}"

    def overrides(self, key: str) -> bool:
        """Whether this listener (or its mechanism) sets ``key`` itself, at start or at run time."""
        return self.key(key) in self.config.dynamic[PER_BROKER] or any(
            key in self.config.per_listener.get((self.listener, mechanism), {})
            for mechanism in (self.mechanism, ""))


def parse_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Topic configs set explicitly; raises ValueError (answered as INVALID_CONFIG) on bad input."""
    return _parse(configs, {key: spec[0] for key, spec in TOPIC_SPECS.items()}, "topic")


# group key -> (parser, default): KIP-848's group configs, with Kafka's defaults and bounds (its
# group.consumer.* broker configs)
GROUP_SPECS: dict[str, tuple[Callable[[Any], int], int]] = {
    "consumer.session.timeout.ms": (_int(45_000, 60_000), 45_000),
    "consumer.heartbeat.interval.ms": (_int(5_000, 15_000), 5_000),
}


def parse_group_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """A group's configs; ValueError (INVALID_CONFIG) names an unknown key or a value out of bounds."""
    return _parse(configs, {key: spec[0] for key, spec in GROUP_SPECS.items()}, "group")


def _parse(configs: Mapping[str, Any], parsers: Mapping[str, Callable[[Any], Any]],
           kind: str) -> dict[str, Any]:
    parsed = {}
    for key, value in configs.items():
        if key not in parsers:
            raise ValueError(f"Unknown {kind} config name: {key}")
        try:
            parsed[key] = parsers[key](value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Invalid value {value!r} for {kind} config {key!r}: expected {exc}.") from exc
    return parsed


def render(value: Any) -> str:
    """A config value as Kafka prints it (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
