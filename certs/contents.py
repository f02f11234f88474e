"""What the certificate Secret holds, read: its keys, the certificates parsed and checked to belong to their keys
(``parse``), and the readers of an x509 certificate the lifecycle's decisions use (certs/lifecycle.py).

Pure: functions of the Secret's bytes and the time, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509 import verification

from certs import pki

# --- the Secret's keys ------------------------------------------------------------------------------

CA_CERT: Final = "ca.crt"
CA_KEY: Final = "ca.key"
NEXT_CA_CERT: Final = "ca-next.crt"
NEXT_CA_KEY: Final = "ca-next.key"
PREVIOUS_CA_CERT: Final = "ca-previous.crt"
TLS_CERT: Final = "tls.crt"
TLS_KEY: Final = "tls.key"
KEYS: Final = (CA_CERT, CA_KEY, NEXT_CA_CERT, NEXT_CA_KEY, PREVIOUS_CA_CERT, TLS_CERT, TLS_KEY)
"""Every key the controller owns in the Secret; any other key is left alone."""

BACKDATE: Final = dt.timedelta(hours=1)
"""notBefore = issue time - 1 h, as cert-controller does: tolerates clock skew between the replica that
issues and everything that verifies (kube-webhook-certgen uses 5 min; an hour costs nothing)."""


# --- what the Secret holds, parsed ------------------------------------------------------------------


@dataclass(frozen=True)
class KeyedCert:
    """A certificate with its private key, both PEM, checked to belong together when parsed."""

    cert_pem: bytes
    key_pem: bytes

    @cached_property
    def cert(self) -> x509.Certificate:
        return pki.load_certificate(self.cert_pem)

    def certified_key(self) -> pki.CertifiedKey:
        return pki.CertifiedKey(cert_pem=self.cert_pem, key_pem=self.key_pem)


@dataclass(frozen=True)
class Material:
    """The Secret's certificates, each either usable in structure or absent (see ``parse``)."""

    ca: KeyedCert | None = None
    next_ca: KeyedCert | None = None
    previous_ca: bytes | None = None
    serving: KeyedCert | None = None
    problems: tuple[str, ...] = field(default=(), compare=False)
    """What was found in the Secret and set aside as unusable (for the log)."""

    def data(self) -> dict[str, bytes]:
        """The Secret's keys for this material (absent ones are not in the dict)."""
        out: dict[str, bytes] = {}
        if self.ca:
            out[CA_CERT], out[CA_KEY] = self.ca.cert_pem, self.ca.key_pem
        if self.next_ca:
            out[NEXT_CA_CERT], out[NEXT_CA_KEY] = self.next_ca.cert_pem, self.next_ca.key_pem
        if self.previous_ca:
            out[PREVIOUS_CA_CERT] = self.previous_ca
        if self.serving:
            out[TLS_CERT], out[TLS_KEY] = self.serving.cert_pem, self.serving.key_pem
        return out


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, bytes]:
    """A Secret's ``data`` as the API returns it (base64 strings) to bytes; undecodable values are dropped."""
    out: dict[str, bytes] = {}
    for key, value in (data or {}).items():
        try:
            out[key] = base64.b64decode(value or "", validate=True)
        except (binascii.Error, ValueError):
            continue
    return out


def parse(data: Mapping[str, bytes]) -> Material:
    """The material in a Secret's (decoded) data. Anything that does not parse, a key that does not match
    its certificate, or a "CA" that is not one, is left out and named in ``problems``: the decision then
    treats it as missing and replaces it, instead of serving or trusting something broken."""
    problems: list[str] = []

    def keyed(cert_key: str, key_key: str, *, ca: bool) -> KeyedCert | None:
        cert_pem, key_pem = data.get(cert_key), data.get(key_key)
        if not cert_pem and not key_pem:
            return None
        if not cert_pem or not key_pem:
            problems.append(f"{cert_key} and {key_key} must both be present")
            return None
        why = _pair_problem(cert_pem, key_pem, ca=ca)
        if why:
            problems.append(f"{cert_key}/{key_key}: {why}")
            return None
        return KeyedCert(cert_pem, key_pem)

    previous = data.get(PREVIOUS_CA_CERT) or None
    if previous is not None:
        try:
            if not _is_ca(pki.load_certificate(previous)):
                raise ValueError("not a CA certificate")
        except ValueError as exc:
            problems.append(f"{PREVIOUS_CA_CERT}: {exc}")
            previous = None
    return Material(
        ca=keyed(CA_CERT, CA_KEY, ca=True),
        next_ca=keyed(NEXT_CA_CERT, NEXT_CA_KEY, ca=True),
        previous_ca=previous,
        serving=keyed(TLS_CERT, TLS_KEY, ca=False),
        problems=tuple(problems),
    )


def _pair_problem(cert_pem: bytes, key_pem: bytes, *, ca: bool) -> str | None:
    try:
        cert = pki.load_certificate(cert_pem)
        key = pki.load_private_key(key_pem)
    except (ValueError, TypeError) as exc:
        return f"does not parse: {exc}"
    if _spki(cert.public_key()) != _spki(key.public_key()):
        return "the key does not belong to the certificate"
    if _is_ca(cert) != ca:
        return "is a CA certificate" if not ca else "is not a CA certificate"
    return None


def _spki(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


# --- time -------------------------------------------------------------------------------------------


def issued_at(cert: x509.Certificate) -> dt.datetime:
    """When the certificate was made: its notBefore is backdated by BACKDATE."""
    return cert.not_valid_before_utc + BACKDATE


def renewal_due_at(cert: x509.Certificate, fraction: float) -> dt.datetime:
    # Life counts from the issue, not from the backdated notBefore: the backdate is slack for skewed clocks,
    # not part of the life (it would shift a short-lived certificate's renewal a lot).
    start, end = min(issued_at(cert), cert.not_valid_after_utc), cert.not_valid_after_utc
    return start + (end - start) * fraction


def expired(cert: x509.Certificate, now: dt.datetime) -> bool:
    # Only the end counts: a certificate from a replica whose clock runs ahead is "not yet valid" for the
    # first BACKDATE at most, and treating it as broken would have replicas replace each other's work.
    return now >= cert.not_valid_after_utc


def signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    """(DNS names, IP addresses) of a certificate."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(ext.get_values_for_type(x509.DNSName)), {str(a) for a in ext.get_values_for_type(x509.IPAddress)}


# --- the trust bundle -------------------------------------------------------------------------------


def trusted_cas(material: Material) -> list[x509.Certificate]:
    """The CAs clients must trust for this material: previous, current and next, oldest first."""
    certs = [
        *([pki.load_certificate(material.previous_ca)] if material.previous_ca else []),
        *([material.ca.cert] if material.ca else []),
        *([material.next_ca.cert] if material.next_ca else []),
    ]
    unique = {c.fingerprint(hashes.SHA256()): c for c in certs}
    return sorted(unique.values(), key=lambda c: (c.not_valid_before_utc, c.serial_number))


def trust_bundle(material: Material) -> bytes:
    """The caBundle for this material, as PEM; a function of the Secret alone (see the module doc)."""
    return b"".join(c.public_bytes(Encoding.PEM) for c in trusted_cas(material))


def bundle_certificates(bundle: bytes) -> list[x509.Certificate]:
    """The certificates in a PEM bundle; an empty or unreadable bundle has none."""
    try:
        return x509.load_pem_x509_certificates(bundle) if bundle.strip() else []
    except ValueError:
        return []


def verifies(leaf_pem: bytes, bundle: bytes, now: dt.datetime, dns_name: str | None = None) -> bool:
    """Whether a client trusting exactly ``bundle`` accepts ``leaf_pem`` at ``now`` (for ``dns_name``).

    Uses cryptography's RFC 5280 path validation, the same checks a Go or OpenSSL client makes: chain,
    validity at ``now``, key usages, and the name when given."""
    roots = bundle_certificates(bundle)
    if not roots:
        return False
    try:
        leaf = pki.load_certificate(leaf_pem)
        builder = verification.PolicyBuilder().store(verification.Store(roots)).time(now)
        dns, ips = sans(leaf)
        subject: x509.DNSName | x509.IPAddress
        if dns_name or dns:
            subject = x509.DNSName(dns_name or sorted(dns)[0])
        elif ips:
            subject = x509.IPAddress(ipaddress.ip_address(sorted(ips)[0]))
        else:
            return False
        builder.build_server_verifier(subject).verify(leaf, [])
    except (ValueError, verification.VerificationError):
        return False
    return True


def fingerprint(cert_pem: bytes) -> str:
    """sha256 of the DER of the first certificate, hex: what ReloadingServerContext reports as served."""
    return hashlib.sha256(pki.load_certificate(cert_pem).public_bytes(Encoding.DER)).hexdigest()
