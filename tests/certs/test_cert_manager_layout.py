"""The servers' hot TLS reload with cert-manager's Secret as the kubelet mounts it (the chart's certs.mode
cert-manager): tls.crt (the leaf, then the issuing CA), tls.key (PKCS#1/SEC1 by default, or PKCS#8), ca.crt,
each a symlink through ..data, swapped in one rename when cert-manager renews."""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from certs import pki
from certs.files import DATA_LINK, write_served
from certs.lifecycle import service_dns_names
from serving.tls import ReloadingServerContext

NAME = "dispatch-k8s.dispatch-system.svc"


def _secret(kind: pki.KeyKind, encoding: str, subject: str) -> tuple[dict[str, bytes], bytes]:
    """cert-manager's three keys from a CA Issuer, and the CA alone (what a client trusts)."""
    ca = pki.make_ca(f"{subject}-ca", key_kind=kind)
    leaf = pki.make_serving_cert(ca, NAME, dns_names=service_dns_names("dispatch-k8s", "dispatch-system"),
                                 key_kind=kind)  # fmt: skip
    key = pki.load_private_key(leaf.key_pem)
    fmt = {"PKCS1": serialization.PrivateFormat.TraditionalOpenSSL, "PKCS8": serialization.PrivateFormat.PKCS8}
    key_pem = key.private_bytes(serialization.Encoding.PEM, fmt[encoding], serialization.NoEncryption())
    return {"tls.crt": leaf.cert_pem + ca.cert_pem, "tls.key": key_pem, "ca.crt": ca.cert_pem}, ca.cert_pem


def _handshake(client: ssl.SSLContext, server: ssl.SSLContext) -> str:
    """The subject's CN the client verified, or raises ssl.SSLCertVerificationError."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=NAME)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    (((_, cn),),) = [rdn for rdn in c.getpeercert()["subject"] if rdn[0][0] == "commonName"]
    return cn


@pytest.mark.parametrize(
    ("kind", "encoding"),
    [(pki.KeyKind.ECDSA_P256, "PKCS1"), (pki.KeyKind.ECDSA_P256, "PKCS8"), (pki.KeyKind.RSA_2048, "PKCS1")],
)
def test_cert_managers_secret_is_served_and_its_renewal_reloaded(tmp_path: Path, kind, encoding):
    mounted = tmp_path / "tls"
    first, first_ca = _secret(kind, encoding, "first")
    write_served(mounted, first)
    assert (mounted / DATA_LINK).is_symlink()
    tls = ReloadingServerContext(mounted / "tls.crt", mounted / "tls.key")
    assert tls.info.subject == f"CN={NAME}", "the leaf, not the CA after it"
    trusting_first = ssl.create_default_context(cadata=first_ca.decode())
    assert _handshake(trusting_first, tls.context) == NAME

    # cert-manager renews with a new CA (its CA Certificate rotated): the kubelet swaps ..data.
    second, second_ca = _secret(kind, encoding, "second")
    write_served(mounted, second)
    assert tls.check() is True
    trusting_second = ssl.create_default_context(cadata=second_ca.decode())
    assert _handshake(trusting_second, tls.context) == NAME
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(trusting_first, tls.context)
    assert tls.failures == 0


def test_a_half_written_renewal_keeps_the_current_certificate(tmp_path: Path):
    mounted = tmp_path / "tls"
    first, first_ca = _secret(pki.KeyKind.ECDSA_P256, "PKCS1", "first")
    write_served(mounted, first)
    tls = ReloadingServerContext(mounted / "tls.crt", mounted / "tls.key")
    second, _ = _secret(pki.KeyKind.ECDSA_P256, "PKCS1", "second")
    write_served(mounted, {**second, "tls.key": first["tls.key"]})  # a certificate with another's key
    assert tls.check() is False
    assert tls.failures == 1
    assert _handshake(ssl.create_default_context(cadata=first_ca.decode()), tls.context) == NAME
