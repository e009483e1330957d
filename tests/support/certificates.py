"""Throwaway PKI for TLS tests: a CA, a broker certificate for localhost/127.0.0.1, client
certificates from that CA and from another one (untrusted), a broker certificate from that other CA (one
listener's own), written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "broker-key-secret"  # the encrypted copy of the broker key (tests grep logs for it)


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate clients and the broker trust
    broker: Path  # broker private key + certificate chain (PEM keystore)
    broker_encrypted: Path  # the same, key encrypted with KEY_PASSWORD
    broker_cert: Path
    broker_key: Path
    client_cert: Path  # CN=client,OU=tests,O=strom, signed by `ca`
    client_key: Path
    client_keystore: Path  # client key + certificate (Kafka's PEM keystore)
    stranger_cert: Path  # CN=stranger, signed by another CA
    stranger_key: Path
    other_ca: Path
    other_broker: Path  # a broker keystore (localhost/127.0.0.1) signed by `other_ca`: one listener's own

    client_principal: str = "User:CN=client,OU=tests,O=strom"


def _name(**parts: str) -> x509.Name:
    oids = {"O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in parts.items()])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _certificate(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                 issuer_key: ec.EllipticCurvePrivateKey, ca: bool = False,
                 server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    if not ca:
        # a node's certificate also authenticates it to the other nodes (Kafka's inter-broker TLS)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [
            ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    else:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_key = _key(), _key()
    ca_name, other_name = _name(O="strom", CN="strom test CA"), _name(O="elsewhere", CN="another CA")
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
    other = _certificate(other_name, other_key, other_name, other_key, ca=True)
    broker_key, client_key, stranger_key = _key(), _key(), _key()
    broker = _certificate(_name(O="strom", CN="localhost"), broker_key, ca_name, ca_key, server=True)
    client = _certificate(_name(O="strom", OU="tests", CN="client"), client_key, ca_name, ca_key)
    stranger = _certificate(_name(O="elsewhere", CN="stranger"), stranger_key, other_name, other_key)
    other_broker_key = _key()
    other_broker = _certificate(_name(O="elsewhere", CN="localhost"), other_broker_key, other_name, other_key,
                                server=True)
    files = {
        "ca": _pem(ca), "other_ca": _pem(other),
        "broker": _key_pem(broker_key) + _pem(broker) + _pem(ca),
        "broker_encrypted": _key_pem(broker_key, KEY_PASSWORD) + _pem(broker) + _pem(ca),
        "broker_cert": _pem(broker), "broker_key": _key_pem(broker_key),
        "client_cert": _pem(client), "client_key": _key_pem(client_key),
        "client_keystore": _key_pem(client_key) + _pem(client),
        "stranger_cert": _pem(stranger), "stranger_key": _key_pem(stranger_key),
        "other_broker": _key_pem(other_broker_key) + _pem(other_broker) + _pem(other),
    }
    paths = {}
    for name, content in files.items():
        paths[name] = directory / f"{name}.pem"
        paths[name].write_bytes(content)
    return Pki(**paths)


@dataclass(frozen=True)
class RenewedPki:
    """A new CA and what it signs: the broker certificate rotated in (the same subject and names as
    make_pki's, so Kafka's checks accept it) and a client certificate of the new CA."""

    ca: Path
    broker: Path  # broker private key + certificate chain (PEM keystore)
    broker_serial: int
    client_cert: Path  # CN=client,OU=tests,O=strom, signed by the new CA
    client_key: Path


def renewed_pki(directory: Path, alternative_names: bool = True) -> RenewedPki:
    """Certificates of a new CA, for rotating a running broker's keystore and truststore (without
    ``alternative_names``, a broker certificate lacking make_pki's localhost/127.0.0.1)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, broker_key, client_key = _key(), _key(), _key()
    ca_name = _name(O="strom", CN="strom renewed CA")
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
    broker = _certificate(_name(O="strom", CN="localhost"), broker_key, ca_name, ca_key,
                          server=alternative_names)
    client = _certificate(_name(O="strom", OU="tests", CN="client"), client_key, ca_name, ca_key)
    files = {"ca": _pem(ca), "broker": _key_pem(broker_key) + _pem(broker) + _pem(ca),
             "client_cert": _pem(client), "client_key": _key_pem(client_key)}
    paths = {name: directory / f"renewed_{name}.pem" for name in files}
    for name, content in files.items():
        paths[name].write_bytes(content)
    return RenewedPki(broker_serial=broker.serial_number, **paths)
