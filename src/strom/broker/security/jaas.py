"""JAAS configs as Kafka's brokers take them per listener and mechanism
(``listener.name.<listener>.<mechanism>.sasl.jaas.config``): one login module, its control flag and its
options, e.g. ``org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";``.

strom reads the options Kafka's server side reads: PLAIN's ``user_<name>="<password>"`` (the users that
listener accepts) and the unsecured OAUTHBEARER validator's ``unsecuredValidator*``. The options hold
passwords: a parsed config never shows them (``repr`` lists the option names only) and a parse error never
quotes the text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

LOGIN_MODULES = {
    "plain": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "scram-sha-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "scram-sha-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "oauthbearer": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
"""The login module of each SASL mechanism strom serves (Kafka's class names)."""
_FLAGS = ("required", "requisite", "sufficient", "optional")
_MODULE = re.compile(r"\s*(?P<module>[A-Za-z_$][\w$.]*)\s+(?P<flag>[A-Za-z]+)(?P<options>.*?);\s*", re.S)
_OPTION = re.compile(r'\s*(?P<key>[^\s=;"]+)\s*=\s*'
                     r'(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<word>[^\s;"]+))', re.S)
_ESCAPE = re.compile(r"\\(.)", re.S)


@dataclass(frozen=True, slots=True, repr=False)
class JaasConfig:
    """One login module with its options (their values are secrets: never shown)."""

    login_module: str
    options: Mapping[str, str]

    def __repr__(self) -> str:
        return f"JaasConfig({self.login_module}, options {sorted(self.options)})"

    __str__ = __repr__

    def plain_users(self) -> dict[str, str]:
        """PLAIN's users: ``user_<name>="<password>"`` options."""
        return {key[len("user_"):]: value for key, value in self.options.items() if key.startswith("user_")}


def parse_jaas(text: object) -> JaasConfig:
    """A ``sasl.jaas.config`` value; ValueError saying what is wrong without quoting the value (its options
    hold passwords)."""
    if isinstance(text, JaasConfig):
        return text
    found = _MODULE.fullmatch(str(text))
    if found is None:
        raise ValueError("one login module: '<LoginModule class> required <key>=\"<value>\" ...;' (the value "
                         "is not shown: it may hold passwords)")
    if found["flag"].lower() not in _FLAGS:
        raise ValueError(f"a control flag ({', '.join(_FLAGS)}) after the login module {found['module']}")
    options, rest = {}, found["options"]
    while rest.strip():
        option = _OPTION.match(rest)
        if option is None:
            raise ValueError(f"<key>=\"<value>\" options after {found['module']} {found['flag']} (the value "
                             "is not shown: it may hold passwords)")
        value = option["word"] if option["quoted"] is None else _ESCAPE.sub(r"\1", option["quoted"])
        options[option["key"]] = value
        rest = rest[option.end():]
    return JaasConfig(found["module"], options)


def check_login_module(jaas: JaasConfig, mechanism: str) -> None:
    """ValueError if ``jaas`` names another login module than ``mechanism``'s (a mistake strom would
    otherwise serve silently)."""
    wanted = LOGIN_MODULES[mechanism.lower()]
    if jaas.login_module != wanted:
        raise ValueError(f"{wanted} for {mechanism.upper()} (strom serves Kafka's login modules only), not "
                         f"{jaas.login_module}")
