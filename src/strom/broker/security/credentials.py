"""The broker's SCRAM users, persisted in `<data dir>/security/scram-credentials.json` (salts and
derived keys only, file mode 0600) beside the broker's other metadata."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from strom.broker.lock import lock_data_dir
from strom.broker.security.scram import Credential, Mechanism

FILE = Path("security") / "scram-credentials.json"


class CredentialStore:
    """Users and their credentials per mechanism; every change is written before it is answered."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / FILE
        self._users: dict[str, dict[Mechanism, Credential]] = {}
        if self._path.exists():
            for user, entries in json.loads(self._path.read_text()).items():
                self._users[user] = {Mechanism.named(e["mechanism"]): _decode(e) for e in entries}

    def get(self, user: str, mechanism: Mechanism) -> Credential | None:
        return self._users.get(user, {}).get(mechanism)

    def of(self, user: str) -> list[Credential]:
        return list(self._users.get(user, {}).values())

    def users(self) -> list[str]:
        return sorted(self._users)

    def put(self, user: str, credential: Credential) -> None:
        self._users.setdefault(user, {})[credential.mechanism] = credential

    def delete(self, user: str, mechanism: Mechanism) -> bool:
        """Removes one credential; False if the user had none for `mechanism`."""
        credentials = self._users.get(user, {})
        if credentials.pop(mechanism, None) is None:
            return False
        if not credentials:
            del self._users[user]
        return True

    def save(self) -> None:
        """Writes the store atomically (a crash leaves the old or the new file, never half of one)."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        data = {user: [_encode(c) for c in credentials.values()] for user, credentials in self._users.items()}
        tmp = self._path.with_suffix(".tmp")
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(data, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        tmp.replace(self._path)


def _encode(credential: Credential) -> dict[str, object]:
    return {"mechanism": credential.mechanism.mechanism_name, "iterations": credential.iterations,
            **{field: base64.b64encode(getattr(credential, field)).decode()
               for field in ("salt", "stored_key", "server_key")}}


def _decode(entry: dict) -> Credential:
    return Credential(Mechanism.named(entry["mechanism"]), base64.b64decode(entry["salt"]),
                      entry["iterations"],
                      base64.b64decode(entry["stored_key"]), base64.b64decode(entry["server_key"]))


def add_scram_user(data_dir: Path, name: str, password: str, mechanisms: list[Mechanism],
                   iterations: int) -> None:
    """Adds a user to a broker's data directory while no broker uses it (its lock is taken, so a
    running broker, which would not see the change, makes this a BrokerStartError)."""
    descriptor = lock_data_dir(Path(data_dir).resolve())
    try:
        store = CredentialStore(Path(data_dir).resolve())
        for mechanism in mechanisms:
            store.put(name, Credential.from_password(mechanism, password, iterations))
        store.save()
    finally:
        os.close(descriptor)
