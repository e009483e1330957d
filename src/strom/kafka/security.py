"""What a refused client is told: who it connected as, what it may not do and how to grant it, or why
it could not log in; and which client settings are secrets (never shown)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from strom.errors import StromError
from strom.kafka.causes import causes, kafka_error

SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
                         "ssl.truststore.password", "sasl.oauthbearer.client.secret",
                         "sasl.oauthbearer.config", "sasl.jaas.config"})
AUTHENTICATION_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


class AuthorizationError(StromError):
    """The cluster refused an operation for want of an ACL."""


class AuthenticationError(StromError):
    """The cluster did not accept the client's credentials or certificate, or the client not its."""


def security_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that say how a client reaches and logs in to the cluster (``security.protocol``,
    ``ssl.*``, ``sasl.*``): every client a component makes beside the one it was configured for (an admin
    client creating topics, a producer of retries) needs them too."""
    return {k: v for k, v in config.items() if k == "security.protocol" or k.startswith(("ssl.", "sasl."))}


def identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a refusal names of a client with ``config``: who it logs in as, its group and transactional
    id (its security settings without the secrets, ``group.id``, ``transactional.id``).
    ``strom.kafka.clients`` keeps it on each client it builds, so that whoever meets a refusal later
    names it (``identity_of``)."""
    ids = {k: config[k] for k in ("group.id", "transactional.id") if config.get(k)}
    return {k: v for k, v in {**security_settings(config), **ids}.items() if k not in SECRET_KEYS}


def identity_of(client: Any) -> Mapping[str, Any]:
    """The ``identity`` a client of ``strom.kafka.clients`` was built with (empty for other clients)."""
    return getattr(client, "identity", {})


def principal(settings: Mapping[str, Any]) -> str:
    """The principal the cluster sees for these client settings, as far as the client can tell."""
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    if protocol.startswith("SASL") and sasl_mechanism(settings) == "OAUTHBEARER":
        return "the principal of the OAUTHBEARER token (User:<its sub claim>)"
    if protocol.startswith("SASL") and settings.get("sasl.username"):
        return f"User:{settings['sasl.username']}"
    if protocol == "SSL" and settings.get("ssl.certificate.location"):
        return f"the principal of the certificate {settings['ssl.certificate.location']} (User:<its subject>)"
    return "User:ANONYMOUS"


def authorization_error(settings: Mapping[str, Any], resource_type: str, name: str, operation: str,
                        code: str) -> AuthorizationError:
    """One line naming the principal, the resource and the operation refused, and the ACL to add."""
    option = {"Topic": "--topic", "Group": "--group", "TransactionalId": "--transactional-id"}.get(
        resource_type, "--cluster")
    who = principal(settings)
    return AuthorizationError(
        f"{who} may not {operation} {resource_type} {name!r} ({code}): an administrator grants it with "
        f"kafka-acls --add --allow-principal {who if who.startswith('User:') else 'User:...'} "
        f"--operation {operation} {option} {name} (docs/deploy.md lists the ACLs strom needs).")


_REFUSED = {KafkaError.TOPIC_AUTHORIZATION_FAILED: "Topic", KafkaError.GROUP_AUTHORIZATION_FAILED: "Group",
            KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalId"}


def refusal(settings: Mapping[str, Any], error: KafkaError, topic: str = "", group: str = "",
            transactional_id: str = "", topic_operation: str = "Read",
            group_operation: str = "Read") -> AuthorizationError | None:
    """``error`` as an AuthorizationError naming the resource refused (the topic, group or transactional
    id the caller was using), or None when it is no missing ACL. librdkafka reports most refusals as
    ordinary, non-fatal errors and would go on asking: callers raise this once instead."""
    kind = _REFUSED.get(error.code())
    if kind is None:
        return None
    name, operation = {"Topic": (topic, topic_operation), "Group": (group, group_operation),
                       "TransactionalId": (transactional_id, "Write")}[kind]
    return authorization_error(settings, kind, name or "?", operation, error.name())


def refusal_behind(settings: Mapping[str, Any], exc: BaseException,
                   **names: str) -> AuthorizationError | None:
    """``refusal`` of the Kafka error ``exc`` was raised from (strom's errors keep it as their cause)."""
    error = next((error for error in map(kafka_error, causes(exc)) if error is not None), None)
    return None if error is None else refusal(settings, error, **names)


def authentication_error(settings: Mapping[str, Any], servers: str, reason: str) -> AuthenticationError:
    """Why the client could not log in, said at start-up instead of retrying for ever."""
    mechanism = sasl_mechanism(settings)
    if "certificate verify failed" in reason:
        advice = ("the broker's certificate is not signed by a CA the client trusts: set ssl.ca.location to "
                  "the CA that signed it")
    elif mechanism == "OAUTHBEARER":
        advice = ("the cluster did not accept the OAUTHBEARER token: check its principal claim and expiry "
                  "and the sasl.oauthbearer.* settings")
    elif str(settings.get("security.protocol", "")).upper().startswith("SASL"):
        advice = (f"the cluster did not accept {principal(settings)} with {mechanism}: check sasl.username "
                  "and sasl.password (and sasl.mechanism)")
    else:
        advice = "the cluster did not accept the client's certificate: check ssl.certificate.location"
    return AuthenticationError(f"Cannot log in to {servers}: {advice} ({redact(reason, settings)}).")


def sasl_mechanism(settings: Mapping[str, Any]) -> str:
    """The SASL mechanism the settings ask for (librdkafka's default: GSSAPI), upper case."""
    return str(settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "GSSAPI").upper()


def redact(text: str, settings: Mapping[str, Any]) -> str:
    """`text` with the value of every secret setting replaced by ***."""
    for key in SECRET_KEYS:
        value = settings.get(key)
        if value:
            text = text.replace(str(value), "***")
    return text

