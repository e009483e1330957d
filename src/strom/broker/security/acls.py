"""Kafka's ACL model and authorizer: a binding allows or denies a principal, from a host, one
operation on resources matched literally or by prefix. Deny wins over allow; READ, WRITE, DELETE
and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS; super users may do everything.
Bindings are persisted in `<data dir>/security/acls.json`."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path

FILE = Path("security") / "acls.json"
WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


IMPLIED_BY = {Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
              Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS}}
# the operations each resource type supports (what `*_authorized_operations` can report)
SUPPORTED = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                         Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DELETE, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def invalid(self) -> str | None:
        """Why Kafka would refuse to create this binding, or None."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return "a binding needs a concrete resource type"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "a binding's pattern type is LITERAL or PREFIXED"
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            return "a binding needs a concrete operation"
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return "a binding's permission is ALLOW or DENY"
        if not self.resource_name:
            return "the resource name is empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME}"
        if ":" not in self.principal or not self.principal.partition(":")[2]:
            return f"the principal {self.principal!r} is not Type:name (e.g. User:alice)"
        if self.host != WILDCARD and not self.host:
            return "the host is empty: use * for every host"
        return None

    def describe(self) -> str:
        return (f"{self.permission.name} {self.principal} from {self.host} {self.operation.name} on "
                f"{self.resource_type.name} {self.pattern_type.name} {self.resource_name!r}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls match: None and ANY match everything."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and binding.resource_type != self.resource_type:
            return False
        if not self._matches_pattern(binding):
            return False
        return ((self.principal is None or binding.principal == self.principal)
                and (self.host is None or binding.host == self.host)
                and self.operation in (Operation.ANY, binding.operation)
                and self.permission in (Permission.ANY, binding.permission))

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            return self.resource_name is None or binding.applies_to(binding.resource_type, self.resource_name)
        if self.pattern_type != PatternType.ANY and binding.pattern_type != self.pattern_type:
            return False
        return self.resource_name is None or binding.resource_name == self.resource_name

    def invalid(self) -> str | None:
        if ResourceType.UNKNOWN in (self.resource_type,) or self.pattern_type == PatternType.UNKNOWN:
            return "the filter names an unknown resource or pattern type"
        if self.operation == Operation.UNKNOWN or self.permission == Permission.UNKNOWN:
            return "the filter names an unknown operation or permission"
        return None


class Authorizer:
    """Decides whether a principal may do an operation on a resource, from the bindings it holds."""

    def __init__(self, data_dir: Path, super_users: str, allow_if_no_acl: bool) -> None:
        self._path = data_dir / FILE
        self.super_users = frozenset(u.strip() for u in super_users.split(";") if u.strip())
        self.allow_if_no_acl = allow_if_no_acl
        self.bindings: list[AclBinding] = []
        if self._path.exists():
            self.bindings = [_decode(entry) for entry in json.loads(self._path.read_text())]

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        applying = [b for b in self.bindings if b.applies_to(resource_type, name)]
        if not applying:
            return self.allow_if_no_acl
        mine = [b for b in applying if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)]
        if any(b.permission == Permission.DENY and b.operation in (Operation.ALL, operation) for b in mine):
            return False
        granting = {Operation.ALL, operation, *IMPLIED_BY.get(operation, ())}
        return any(b.permission == Permission.ALLOW and b.operation in granting for b in mine)

    def authorize_any(self, principal: str, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether some resource of this type may be operated on (Kafka's authorizeByResourceType,
        e.g. WRITE on any topic lets a producer be idempotent)."""
        if principal in self.super_users:
            return True
        names = {b.resource_name for b in self.bindings if b.resource_type == resource_type
                 and b.permission == Permission.ALLOW}
        return any(self.authorize(principal, host, operation, resource_type, n) for n in names)

    def add(self, bindings: list[AclBinding]) -> None:
        self.bindings.extend(b for b in dict.fromkeys(bindings) if b not in self.bindings)
        self._save()

    def remove(self, acl_filter: AclFilter) -> list[AclBinding]:
        removed = [b for b in self.bindings if acl_filter.matches(b)]
        if removed:
            self.bindings = [b for b in self.bindings if b not in removed]
            self._save()
        return removed

    def _save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as file:
            json.dump([_encode(b) for b in self.bindings], file, indent=1)
            file.flush()
            os.fsync(file.fileno())
        tmp.replace(self._path)


def _encode(binding: AclBinding) -> dict[str, object]:
    return {key: value.name if isinstance(value, IntEnum) else value
            for key, value in asdict(binding).items()}


def _decode(entry: dict) -> AclBinding:
    return AclBinding(ResourceType[entry["resource_type"]], entry["resource_name"],
                      PatternType[entry["pattern_type"]], entry["principal"], entry["host"],
                      Operation[entry["operation"]], Permission[entry["permission"]])
