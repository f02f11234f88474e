"""Small, generic X.509 building blocks: a CA, serving and client certificates, signing keypairs.

Everything is returned as PEM bytes so callers can write files for Go programs (kube-apiserver,
controller-runtime webhook servers) or hand them to Python TLS contexts. Private keys are PKCS#8
("PRIVATE KEY"), which every Go and Python consumer here accepts for both RSA and ECDSA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

# Clocks of the processes that verify these certificates may lag the issuer's a little.
_BACKDATE = dt.timedelta(minutes=5)
DEFAULT_VALIDITY = dt.timedelta(days=365)


class KeyKind(StrEnum):
    ECDSA_P256 = "ecdsa-p256"
    RSA_2048 = "rsa-2048"
    RSA_3072 = "rsa-3072"


@dataclass(frozen=True)
class KeyPair:
    """A private key and its public key, both PEM."""

    private_key_pem: bytes
    public_key_pem: bytes


@dataclass(frozen=True)
class CertifiedKey:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def new_private_key(kind: KeyKind = KeyKind.ECDSA_P256) -> PrivateKey:
    match kind:
        case KeyKind.ECDSA_P256:
            return ec.generate_private_key(ec.SECP256R1())
        case KeyKind.RSA_2048:
            return rsa.generate_private_key(public_exponent=65537, key_size=2048)
        case KeyKind.RSA_3072:
            return rsa.generate_private_key(public_exponent=65537, key_size=3072)


def private_key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_private_key(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise TypeError(f"unsupported private key type {type(key).__name__}")
    return key


def load_certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def make_keypair(kind: KeyKind = KeyKind.ECDSA_P256) -> KeyPair:
    """A bare signing keypair, e.g. for service-account token signing and verification."""
    key = new_private_key(kind)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(private_key_pem=private_key_pem(key), public_key_pem=public)


def make_ca(
    common_name: str,
    *,
    organization: str | None = None,
    validity: dt.timedelta = DEFAULT_VALIDITY,
    key_kind: KeyKind = KeyKind.ECDSA_P256,
    now: dt.datetime | None = None,
    backdate: dt.timedelta = _BACKDATE,
) -> CertifiedKey:
    """A self-signed CA that may sign leaf certificates only (path length 0).

    Valid from ``now - backdate`` to ``now + validity``."""
    key = new_private_key(key_kind)
    subject = _name(common_name, [organization] if organization else [])
    start = _start(now, backdate)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + backdate + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertifiedKey(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=private_key_pem(key))


def make_serving_cert(
    ca: CertifiedKey,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    validity: dt.timedelta = DEFAULT_VALIDITY,
    key_kind: KeyKind = KeyKind.ECDSA_P256,
    now: dt.datetime | None = None,
    backdate: dt.timedelta = _BACKDATE,
) -> CertifiedKey:
    """A TLS server certificate; clients match the host against the SANs, never the CN.

    Valid from ``now - backdate`` to ``now + validity``, but never beyond the CA's own end."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS or IP SAN")
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    return _issue(
        ca,
        _name(common_name, []),
        [ExtendedKeyUsageOID.SERVER_AUTH],
        sans,
        validity=validity,
        key_kind=key_kind,
        now=now,
        backdate=backdate,
    )


def make_client_cert(
    ca: CertifiedKey,
    user: str,
    *,
    groups: Iterable[str] = (),
    validity: dt.timedelta = DEFAULT_VALIDITY,
    key_kind: KeyKind = KeyKind.ECDSA_P256,
    now: dt.datetime | None = None,
) -> CertifiedKey:
    """A TLS client certificate as Kubernetes reads it: CN is the user name, each O is a group."""
    return _issue(
        ca,
        _name(user, list(groups)),
        [ExtendedKeyUsageOID.CLIENT_AUTH],
        [],
        validity=validity,
        key_kind=key_kind,
        now=now,
    )


def _issue(
    ca: CertifiedKey,
    subject: x509.Name,
    usages: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName],
    *,
    validity: dt.timedelta,
    key_kind: KeyKind,
    now: dt.datetime | None,
    backdate: dt.timedelta = _BACKDATE,
) -> CertifiedKey:
    ca_cert = load_certificate(ca.cert_pem)
    ca_key = load_private_key(ca.key_pem)
    key = new_private_key(key_kind)
    start = _start(now, backdate)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(min(start + backdate + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False, rsa=isinstance(key, rsa.RSAPrivateKey)), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertifiedKey(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=private_key_pem(key))


def _name(common_name: str, organizations: list[str]) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _start(now: dt.datetime | None, backdate: dt.timedelta = _BACKDATE) -> dt.datetime:
    return (now or dt.datetime.now(dt.UTC)) - backdate


def _key_usage(*, cert_sign: bool, rsa: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        # RSA key exchange in TLS 1.2 encrypts with the leaf key; ECDSA keys never do.
        key_encipherment=rsa,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
