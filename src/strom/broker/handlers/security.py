"""SaslHandshake and SaslAuthenticate (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), the SCRAM credential APIs and
the ACL APIs (CreateAcls, DescribeAcls, DeleteAcls)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.broker.handlers import RequestContext, handles
from strom.broker.security.acls import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from strom.broker.security.oauthbearer import MECHANISM as OAUTHBEARER
from strom.broker.security.oauthbearer import OAuthBearerError, OAuthBearerServer, SignedJwtValidator
from strom.broker.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    Credential,
    Mechanism,
    ScramError,
    ScramServer,
)

if TYPE_CHECKING:
    from strom.broker.broker import Broker
    from strom.broker.security.listeners import Session

log = logging.getLogger("strom.broker.security")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
NO_AUTHORIZER = "No Authorizer is configured: start the broker with authorizer.class.name set."


@handles(SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, body: Any) -> dict[str, Any]:
    """Starts a login, or a re-authentication of a session with a lifetime (KIP-368) by a client that
    said it re-authenticates, with the mechanism it logged in with."""
    session = ctx.session
    enabled = ctx.broker.config.listener(session.listener.name)["sasl.enabled.mechanisms"].split(",")
    reauthentication = session.authenticated and session.expires_at is not None and session.reauthenticates
    if not session.listener.spec.uses_sasl or (session.authenticated and not reauthentication):
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled}
    mechanism = body.mechanism.upper()
    if mechanism not in enabled or (reauthentication and mechanism != session.mechanism):
        if reauthentication:
            session.close_after_response = True
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled}
    session.mechanism = mechanism
    if mechanism == "PLAIN":
        session.exchange = "PLAIN"
    elif mechanism == OAUTHBEARER:
        session.exchange = OAuthBearerServer(ctx.broker.oauthbearer[session.listener.name])
    else:
        scram = Mechanism.named(mechanism)
        session.exchange = ScramServer(scram, lambda user: ctx.broker.credentials.get(user, scram))
    session.raw_sasl = ctx.api_version == 0  # v0: the SASL tokens follow as bare size-prefixed frames
    return {"error_code": ErrorCode.none, "mechanisms": enabled}


@handles(SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, body: Any) -> dict[str, Any]:
    session = ctx.session
    if session.exchange is None:
        session.close_after_response = True
        return {"error_code": ErrorCode.illegal_sasl_state, "auth_bytes": b"",
                "error_message": "SaslAuthenticate without a SaslHandshake first"}
    session.reauthenticates |= ctx.api_version > 0
    answer, failure = await sasl_step(ctx.broker, session, bytes(body.auth_bytes))
    if failure is not None:
        return {"error_code": ErrorCode.sasl_authentication_failed, "auth_bytes": b"",
                "error_message": failure}
    response = {"error_code": ErrorCode.none, "auth_bytes": answer}
    if ctx.api_version > 0:
        lifetime_ms = 0 if session.exchange is not None else _set_session_expiry(ctx.broker, session)
        response["session_lifetime"] = timedelta(milliseconds=lifetime_ms)
    return response


def _set_session_expiry(broker: Broker, session: Session) -> int:
    """Sets ``session.expires_at``, after which only a re-authentication is served (server.py closes the
    connection otherwise), and returns the session's lifetime in ms as Kafka's SaslServerAuthenticator
    tells it (0 without a limit): the shorter of connections.max.reauth.ms and the credential's remaining
    life (an OAUTHBEARER token's exp)."""
    credential_expiry = session.credential_expires_at
    most = broker.config.listener(session.listener.name, session.mechanism)["connections.max.reauth.ms"]
    if credential_expiry is None and not most:
        session.expires_at = None
        return 0
    lifetimes = [most] if most else []
    if credential_expiry is not None:
        lifetimes.append(int((credential_expiry - time.time()) * 1000))
    lifetime_ms = max(0, min(lifetimes))
    session.expires_at = time.monotonic() + lifetime_ms / 1000
    return lifetime_ms


async def sasl_step(broker: Broker, session: Session, token: bytes) -> tuple[bytes, str | None]:
    """One step of the session's SASL exchange: the answer to the client's token, and the failure
    message if authentication failed (the connection is then closed after the answer). A signed token's
    step runs in a thread: it may fetch the JWKS."""
    if isinstance(session.exchange, OAuthBearerServer) and isinstance(session.exchange.validator,
                                                                      SignedJwtValidator):
        return await asyncio.to_thread(_step, broker, session, token)
    return _step(broker, session, token)


def _step(broker: Broker, session: Session, token: bytes) -> tuple[bytes, str | None]:
    exchange = session.exchange
    try:
        if exchange == "PLAIN":
            user, answer = _plain(broker, session, token), b""
        elif isinstance(exchange, OAuthBearerServer):
            answer = exchange.step(token)
            if exchange.username is None:
                return answer, None
            user = exchange.username
        elif exchange.username is None:
            return exchange.first(token), None
        else:
            answer, user = exchange.final(token), exchange.username
    except (ScramError, OAuthBearerError, UnicodeDecodeError) as exc:
        return b"", _authentication_failed(session, exc)
    if session.authenticated and session.principal != f"User:{user}":
        return b"", _authentication_failed(session, ScramError(
            f"cannot change principals during re-authentication from {session.principal} to User:{user}"))
    if session.authenticated:
        log.info("%s re-authenticated on listener %s from %s", session.principal, session.listener.name,
                 session.client_host)
    session.principal, session.authenticated, session.exchange = f"User:{user}", True, None
    session.credential_expires_at = exchange.expires_at if isinstance(exchange, OAuthBearerServer) else None
    session.raw_sasl = False
    if not session.reauthenticates:  # a v0 client: the lifetime is not told, yet it holds (as in Kafka)
        _set_session_expiry(broker, session)
    return answer, None


def _plain(broker: Broker, session: Session, message: bytes) -> str:
    """The user of a PLAIN message (authzid NUL user NUL password), checked as Kafka's PLAIN server does
    against the listener's JAAS users (``listener.name.<listener>.plain.sasl.jaas.config`` with
    ``user_<name>="<password>"``) when it has a JAAS config; else against the user's SCRAM credentials
    (strom's one user store, which keeps no password)."""
    parts = message.decode("utf-8", errors="strict").split("\0")
    if len(parts) != 3 or not parts[1]:
        raise ScramError("malformed PLAIN message")
    authzid, user, password = parts
    if authzid and authzid != user:
        raise ScramError("the authorization id differs from the user name")
    jaas = broker.config.listener(session.listener.name, "PLAIN")["sasl.jaas.config"]
    if jaas is not None:
        known = jaas.plain_users().get(user)
        accepted = known is not None and hmac.compare_digest(known.encode(), password.encode())
    else:
        accepted = any(c.matches_password(password) for c in broker.credentials.of(user))
    if not accepted:
        raise ScramError("invalid user name or password")
    return user


def _authentication_failed(session: Session, exc: Exception) -> str:
    exchange = session.exchange
    mechanism = ("PLAIN" if exchange == "PLAIN" else exchange.mechanism_name
                 if isinstance(exchange, OAuthBearerServer) else exchange.mechanism.mechanism_name)
    log.info("authentication failed on listener %s from %s with %s: %s", session.listener.name,
             session.client_host, mechanism, exc)
    session.close_after_response = True
    return ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{mechanism}")


# ---- SCRAM credentials ------------------------------------------------------------------------
@handles(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, body: Any) -> dict[str, Any]:
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return {"error_code": ErrorCode.cluster_authorization_failed, "results": [],
                "error_message": "Not authorized to describe SCRAM credentials (DESCRIBE on the cluster)"}
    store = ctx.broker.credentials
    names = [u.name for u in body.users] if body.users else store.users()
    results = []
    for name in dict.fromkeys(names):
        infos = [{"mechanism": c.mechanism, "iterations": c.iterations} for c in store.of(name)]
        if infos:
            results.append({"user": name, "error_code": ErrorCode.none, "credential_infos": infos})
        else:
            results.append({"user": name, "error_code": ErrorCode.resource_not_found, "credential_infos": [],
                            "error_message": "Attempt to describe a user credential that does not exist"})
    duplicates = {n for n in names if names.count(n) > 1}
    for result in results:
        if result["user"] in duplicates:
            result.update(error_code=ErrorCode.duplicate_resource, credential_infos=[],
                          error_message="Cannot describe SCRAM credentials for the same user twice")
    return {"error_code": ErrorCode.none, "results": results}


@handles(ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, body: Any) -> dict[str, Any]:
    allowed = ctx.authorize_cluster(Operation.ALTER)
    store = ctx.broker.credentials
    names = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for name in names:
        if not allowed:
            errors[name] = (ErrorCode.cluster_authorization_failed, "")
        elif not name:
            errors[name] = (ErrorCode.unacceptable_credential, "Username must not be empty")
    for deletion in body.deletions:
        problem = _mechanism_problem(deletion.mechanism) or (
            None if store.get(deletion.name, Mechanism(deletion.mechanism)) else
            (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"))
        if problem and deletion.name not in errors:
            errors[deletion.name] = problem
    for upsertion in body.upsertions:
        problem = _mechanism_problem(upsertion.mechanism) or _iterations_problem(upsertion.iterations)
        if problem and upsertion.name not in errors:
            errors[upsertion.name] = problem
    changed = False
    for deletion in body.deletions:
        if deletion.name not in errors:
            changed |= store.delete(deletion.name, Mechanism(deletion.mechanism))
    for upsertion in body.upsertions:
        if upsertion.name not in errors:
            mechanism = Mechanism(upsertion.mechanism)
            store.put(upsertion.name, Credential.from_salted_password(
                mechanism, bytes(upsertion.salt), upsertion.iterations, bytes(upsertion.salted_password)))
            changed = True
    if changed:
        store.save()
    return {"results": [{"user": name, "error_code": errors.get(name, (ErrorCode.none, None))[0],
                         "error_message": errors.get(name, (None, None))[1] or None}
                        for name in dict.fromkeys(names)]}


def _mechanism_problem(code: int) -> tuple[ErrorCode, str] | None:
    if code not in (Mechanism.SCRAM_SHA_256, Mechanism.SCRAM_SHA_512):
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _iterations_problem(iterations: int) -> tuple[ErrorCode, str] | None:
    if iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, f"Too few iterations (at least {MIN_ITERATIONS})"
    if iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, f"Too many iterations (at most {MAX_ITERATIONS})"
    return None


# ---- ACLs -------------------------------------------------------------------------------------
@handles(DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, body: Any) -> dict[str, Any]:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER, "resources": []}
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return {"error_code": ErrorCode.cluster_authorization_failed, "resources": [],
                "error_message": "Not authorized to describe ACLs (DESCRIBE on the cluster)"}
    acl_filter = _filter(body)
    if acl_filter.invalid():
        return {"error_code": ErrorCode.invalid_request, "error_message": acl_filter.invalid(),
                "resources": []}
    resources: dict[tuple, list[dict[str, Any]]] = {}
    for b in authorizer.bindings:
        if acl_filter.matches(b):
            resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
                {"principal": b.principal, "host": b.host, "operation": b.operation,
                 "permission_type": b.permission})
    return {"error_code": ErrorCode.none, "resources": [
        {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
        for (t, n, p), acls in resources.items()]}


@handles(CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, body: Any) -> dict[str, Any]:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return {"results": [{"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
                            for _ in body.creations]}
    if not ctx.authorize_cluster(Operation.ALTER):
        return {"results": [{"error_code": ErrorCode.cluster_authorization_failed, "error_message":
                             "Not authorized to create ACLs (ALTER on the cluster)"} for _ in body.creations]}
    results, accepted = [], []
    for creation in body.creations:
        try:
            binding = AclBinding(ResourceType(creation.resource_type), creation.resource_name,
                                 PatternType(getattr(creation, "resource_pattern_type", PatternType.LITERAL)),
                                 creation.principal, creation.host, Operation(creation.operation),
                                 Permission(creation.permission_type))
            problem = binding.invalid()
        except ValueError as exc:
            binding, problem = None, str(exc)
        if problem:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": problem})
        else:
            accepted.append(binding)
            results.append({"error_code": ErrorCode.none, "error_message": None})
    if accepted:
        authorizer.add(accepted)
        for binding in accepted:
            log.info("ACL added by %s: %s", ctx.session.principal, binding.describe())
    return {"results": results}


@handles(DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, body: Any) -> dict[str, Any]:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return {"filter_results": [{"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER,
                                    "matching_acls": []} for _ in body.filters]}
    if not ctx.authorize_cluster(Operation.ALTER):
        return {"filter_results": [{"error_code": ErrorCode.cluster_authorization_failed, "matching_acls": [],
                                    "error_message": "Not authorized to delete ACLs (ALTER on the cluster)"}
                                   for _ in body.filters]}
    results = []
    for raw in body.filters:
        acl_filter = _filter(raw)
        if acl_filter.invalid():
            results.append({"error_code": ErrorCode.invalid_request, "error_message": acl_filter.invalid(),
                            "matching_acls": []})
            continue
        removed = authorizer.remove(acl_filter)
        for binding in removed:
            log.info("ACL removed by %s: %s", ctx.session.principal, binding.describe())
        results.append({"error_code": ErrorCode.none, "matching_acls": [
            {"error_code": ErrorCode.none, "resource_type": b.resource_type, "resource_name": b.resource_name,
             "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
             "operation": b.operation, "permission_type": b.permission} for b in removed]})
    return {"filter_results": results}


def _filter(raw: Any) -> AclFilter:
    return AclFilter(raw.resource_type_filter, raw.resource_name_filter,
                     getattr(raw, "pattern_type_filter", PatternType.LITERAL), raw.principal_filter,
                     raw.host_filter, raw.operation, raw.permission_type)
