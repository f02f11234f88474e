"""The caBundle injection as pure functions, the served directory, and ``dispatch-certs generate``."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from certs import injection
from certs.files import DATA_LINK, write_plain, write_served
from serving.tls import ReloadingServerContext
from webhook.configurations import webhook_configurations

BUNDLE = b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"


def configurations(**kwargs) -> list[dict]:
    docs = webhook_configurations(namespace="dispatch-system", **kwargs)
    for doc in docs:
        doc["metadata"]["resourceVersion"] = "7"
    return docs


def test_only_our_named_and_labelled_configurations_are_ours():
    vwc, mwc = configurations()
    assert injection.is_ours(vwc, ["dispatch-k8s"])
    assert injection.is_ours(mwc, ["dispatch-k8s"])
    assert not injection.is_ours(vwc, ["other"]), "our label on someone else's name"
    unlabelled = {**vwc, "metadata": {"name": "dispatch-k8s", "labels": {}}}
    assert not injection.is_ours(unlabelled, ["dispatch-k8s"]), "our name without our label"
    assert not injection.is_ours(None, ["dispatch-k8s"])


def test_the_patch_sets_every_entry_and_is_preconditioned():
    vwc, _ = configurations()
    ops = injection.injection_patch(vwc, BUNDLE)
    assert ops[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"}
    assert [op["path"] for op in ops[1:]] == [
        f"/webhooks/{i}/clientConfig/caBundle" for i in range(len(vwc["webhooks"]))
    ]
    assert {op["op"] for op in ops[1:]} == {"add"}
    assert all(base64.b64decode(op["value"]) == BUNDLE for op in ops[1:])
    assert not injection.carries(vwc, BUNDLE)


def test_nothing_to_patch_when_every_entry_carries_the_bundle():
    vwc, _ = configurations(ca_bundle=BUNDLE)
    assert injection.carries(vwc, BUNDLE)
    assert injection.injection_patch(vwc, BUNDLE) is None
    assert injection.all_injected([vwc, None], BUNDLE), "a missing configuration needs nothing"


def test_a_blanked_or_partial_bundle_is_patched_entry_by_entry():
    vwc, _ = configurations(ca_bundle=BUNDLE)
    vwc["webhooks"][1]["clientConfig"].pop("caBundle")
    vwc["webhooks"][2]["clientConfig"]["caBundle"] = "not base64!"
    bundles = injection.bundles(vwc)
    assert bundles[1:3] == [b"", b""]
    assert set(bundles[:1] + bundles[3:]) == {BUNDLE}, "the other entries keep theirs"
    ops = injection.injection_patch(vwc, BUNDLE)
    assert [op["path"] for op in ops[1:]] == ["/webhooks/1/clientConfig/caBundle", "/webhooks/2/clientConfig/caBundle"]
    assert not injection.all_injected([vwc], BUNDLE)


# --- the served directory -------------------------------------------------------------------------------


def _pair(tmp: Path, name: str) -> dict[str, bytes]:
    from certs import pki

    ca = pki.make_ca("t")
    leaf = pki.make_serving_cert(ca, name, dns_names=[name])
    return {"tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem, "ca.crt": ca.cert_pem}


def test_served_directory_is_swapped_atomically_and_reloads(tmp_path: Path):
    out = tmp_path / "served"
    first = _pair(tmp_path, "first")
    assert write_served(out, first) is True
    assert write_served(out, first) is False, "unchanged: nothing written"
    assert (out / DATA_LINK).is_symlink()
    assert (out / "tls.crt").is_symlink()
    assert stat.S_IMODE(os.stat(out / "tls.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out / "tls.crt").st_mode) == 0o644
    tls = ReloadingServerContext(out / "tls.crt", out / "tls.key")
    assert tls.info.subject == "CN=first"
    second = _pair(tmp_path, "second")
    assert write_served(out, second) is True
    assert tls.check() is True
    assert tls.info.subject == "CN=second"
    hidden = [p.name for p in out.iterdir() if p.name.startswith("..") and p.name != DATA_LINK]
    assert len(hidden) == 1, "the old data directory is removed"


def test_served_directory_replaces_plain_files(tmp_path: Path):
    out = tmp_path / "served"
    write_plain(out, _pair(tmp_path, "plain"))
    write_served(out, _pair(tmp_path, "linked"))
    assert (out / "tls.crt").is_symlink()
    assert x509.load_pem_x509_certificate((out / "tls.crt").read_bytes()).subject.rfc4514_string() == "CN=linked"


# --- dispatch-certs generate ------------------------------------------------------------------------------


def _certs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "certs", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_generate_writes_a_ca_and_a_serving_certificate(tmp_path: Path):
    out = tmp_path / "pki"
    done = _certs(
        "generate",
        "--out",
        str(out),
        "--dns",
        "localhost",
        "dispatch-k8s.ns.svc",
        "--ip",
        "127.0.0.1",
        "--validity",
        "30",
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE(os.stat(out / "tls.key").st_mode) == 0o600
    leaf = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "dispatch-k8s.ns.svc"]
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert 29 < (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days <= 30
    # A TLS client trusting ca.crt accepts tls.crt for those names.
    client = ssl.create_default_context(cafile=str(out / "ca.crt"))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(out / "tls.crt", out / "tls.key")
    _handshake(client, server, "dispatch-k8s.ns.svc")


def _handshake(client: ssl.SSLContext, server: ssl.SSLContext, name: str) -> None:
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=name)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    assert c.version() is not None
    assert c.getpeercert()["subject"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "x"], "give at least one --dns or --ip"),
        (["--out", "x", "--dns", "a", "--validity", "0"], "must be positive"),
        (["--out", "x", "--ip", "not-an-ip"], "does not appear to be an IPv4 or IPv6 address"),
    ],
)
def test_generate_refuses_bad_input(tmp_path: Path, args, message):
    done = _certs("generate", *[a if a != "x" else str(tmp_path / "x") for a in args])
    assert done.returncode != 0
    assert message in done.stderr
