"""certs/pki.py: the certificates carry what Kubernetes and TLS clients read from them."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs import pki


@pytest.fixture(scope="module")
def ca() -> pki.CertifiedKey:
    return pki.make_ca("test-ca", organization="dispatch")


def test_ca_is_a_ca_that_signs_only_leaves(ca: pki.CertifiedKey) -> None:
    cert = pki.load_certificate(ca.cert_pem)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca is True
    assert constraints.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert cert.subject == cert.issuer


def test_serving_cert_has_the_sans_and_server_usage(ca: pki.CertifiedKey) -> None:
    leaf = pki.make_serving_cert(ca, "svc", dns_names=["svc.ns.svc", "localhost"], ip_addresses=["127.0.0.1"])
    cert = pki.load_certificate(leaf.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["svc.ns.svc", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    cert.verify_directly_issued_by(pki.load_certificate(ca.cert_pem))


def test_serving_cert_needs_a_san(ca: pki.CertifiedKey) -> None:
    with pytest.raises(ValueError, match="SAN"):
        pki.make_serving_cert(ca, "nameless")


def test_client_cert_names_user_and_groups(ca: pki.CertifiedKey) -> None:
    leaf = pki.make_client_cert(ca, "alice", groups=["system:masters", "team-a"])
    cert = pki.load_certificate(leaf.cert_pem)
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == ["alice"]
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "team-a",
    ]
    assert ExtendedKeyUsageOID.CLIENT_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    cert.verify_directly_issued_by(pki.load_certificate(ca.cert_pem))


def test_leaf_never_outlives_its_ca() -> None:
    short_ca = pki.make_ca("short", validity=dt.timedelta(days=1))
    leaf = pki.make_client_cert(short_ca, "bob", validity=dt.timedelta(days=365))
    assert (
        pki.load_certificate(leaf.cert_pem).not_valid_after_utc
        <= pki.load_certificate(short_ca.cert_pem).not_valid_after_utc
    )


@pytest.mark.parametrize("kind", list(pki.KeyKind))
def test_keypair_signs_and_verifies(kind: pki.KeyKind) -> None:
    pair = pki.make_keypair(kind)
    private = pki.load_private_key(pair.private_key_pem)
    public = serialization.load_pem_public_key(pair.public_key_pem)
    assert pair.private_key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    if isinstance(private, rsa.RSAPrivateKey):
        assert isinstance(public, rsa.RSAPublicKey)
        signature = private.sign(b"m", padding.PKCS1v15(), hashes.SHA256())
        public.verify(signature, b"m", padding.PKCS1v15(), hashes.SHA256())
    else:
        assert isinstance(public, ec.EllipticCurvePublicKey)
        signature = private.sign(b"m", ec.ECDSA(hashes.SHA256()))
        public.verify(signature, b"m", ec.ECDSA(hashes.SHA256()))


def test_tls_handshake_with_mutual_authentication(ca: pki.CertifiedKey, tmp_path: Path) -> None:
    server_pair = pki.make_serving_cert(ca, "server", ip_addresses=["127.0.0.1"], key_kind=pki.KeyKind.RSA_2048)
    client_pair = pki.make_client_cert(ca, "carol", groups=["g"])
    for name, pair in (("server", server_pair), ("client", client_pair)):
        (tmp_path / f"{name}.crt").write_bytes(pair.cert_pem)
        (tmp_path / f"{name}.key").write_bytes(pair.key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)

    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    server_ctx.load_verify_locations(tmp_path / "ca.crt")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client_ctx.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        seen: list[object] = []

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                seen.append(tls.getpeercert()["subject"])
                tls.sendall(b"ok")

        thread = threading.Thread(target=serve)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.recv(2) == b"ok"
        thread.join(5)
    assert seen == [((("organizationName", "g"),), (("commonName", "carol"),))]
