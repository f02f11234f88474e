"""The serving certificate follows the files on disk: consistent pairs are taken, anything else is not, and a
rotation under load fails no request."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import Callable

import pytest
from cryptography import x509

from serving.tls import CertificateLoadError, ReloadingServerContext
from tests.webhook.conftest import HOST, Pki, Running, admission_review


def _serial(der: bytes) -> int:
    return x509.load_der_x509_certificate(der).serial_number


def _pem_serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


async def _served_serial(port: int, pki: Pki) -> int:
    _, writer = await asyncio.open_connection(HOST, port, ssl=pki.client_context())
    try:
        return _serial(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
    finally:
        writer.close()


class Connection:
    """One HTTPS connection, kept alive, with its peer certificate at hand (aiohttp lets go of the
    transport as soon as a small response is read)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.serial = _serial(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))

    @classmethod
    async def open(cls, port: int, pki: Pki) -> Connection:
        return cls(*await asyncio.open_connection(HOST, port, ssl=pki.client_context()))

    async def validate(self, review: dict) -> tuple[int, dict]:
        body = json.dumps(review).encode()
        head = f"POST /validate HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        self.writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        status_line = await self.reader.readline()
        headers = {}
        while (line := await self.reader.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        payload = await self.reader.readexactly(int(headers["content-length"]))
        return int(status_line.split()[1]), json.loads(payload)

    def close(self) -> None:
        self.writer.close()


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "serving.tls" and r.levelno == logging.ERROR]


def test_only_consistent_pairs_are_loaded(tls_files: Pki, caplog: pytest.LogCaptureFixture):
    tls = ReloadingServerContext(tls_files.cert_file, tls_files.key_file)
    first = tls.info.serial
    assert first == _pem_serial(tls_files.cert_file.read_bytes())
    assert tls.check() is False, "nothing changed"

    new = tls_files.issue("rotated")
    tls_files.cert_file.write_bytes(new.cert_pem)  # the key is still the old one: half a rotation
    assert tls.check() is False
    assert tls.check() is False
    assert tls.info.serial == first
    assert (tls.reloads, tls.failures) == (0, 1)
    assert len(_errors(caplog)) == 1, "a pair that stays broken is logged once"
    assert "keeping the current certificate" in _errors(caplog)[0]

    tls_files.key_file.write_bytes(new.key_pem)
    assert tls.check() is True
    assert tls.info.serial == _pem_serial(new.cert_pem)
    assert (tls.reloads, tls.failures) == (1, 1)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda files: files.key_file.unlink(),
        lambda files: files.cert_file.write_bytes(b"-----BEGIN CERTIFICATE-----\ntruncated"),
        lambda files: files.key_file.write_bytes(b""),
    ],
    ids=["key-missing", "cert-truncated", "key-empty"],
)
def test_unreadable_pairs_keep_the_old_certificate(tls_files: Pki, breakage):
    tls = ReloadingServerContext(tls_files.cert_file, tls_files.key_file)
    first, current = tls.info.serial, tls._current
    breakage(tls_files)
    assert tls.check() is False
    assert (tls.info.serial, tls._current, tls.failures) == (first, current, 1)
    tls_files.install(tls_files.issue("fixed"))
    assert tls.check() is True


def test_a_bad_pair_at_start_is_an_error(tls_files: Pki):
    other = tls_files.issue("other")
    tls_files.key_file.write_bytes(other.key_pem)
    with pytest.raises(CertificateLoadError, match="cannot load"):
        ReloadingServerContext(tls_files.cert_file, tls_files.key_file)
    tls_files.key_file.unlink()
    with pytest.raises(CertificateLoadError, match="cannot read"):
        ReloadingServerContext(tls_files.cert_file, tls_files.key_file)


def test_context_refuses_tls_below_1_2(tls_files: Pki):
    tls = ReloadingServerContext(tls_files.cert_file, tls_files.key_file)
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert tls.context.options & ssl.OP_NO_TICKET


@pytest.mark.asyncio
async def test_new_connections_see_the_new_certificate_and_old_ones_keep_working(server: Running):
    port = int(server.url.rsplit(":", 1)[1])
    first = await _served_serial(port, server.pki)
    assert first == server.webhook.tls.info.serial

    kept = await Connection.open(port, server.pki)  # a keep-alive connection opened before the rotation
    assert (await kept.validate(admission_review()))[0] == 200

    new = server.pki.issue("rotated")
    server.pki.install(new)
    assert server.webhook.tls.check() is True
    assert await _served_serial(port, server.pki) == _pem_serial(new.cert_pem)

    status, answer = await kept.validate(admission_review(uid="kept"))
    assert (status, answer["response"]["uid"]) == (200, "kept")
    assert kept.serial == first, "the open connection kept its certificate"
    kept.close()


async def _until(condition: Callable[[], bool], polls: int = 200) -> None:
    """Wait (up to polls x 50 ms) for the background poller, not a check() of the test's own, to act."""
    for _ in range(polls):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the certificate poller did not act in time")


def _replace_atomically(path, data: bytes) -> None:
    """As the kubelet updates a mounted Secret: the new content appears whole, at once."""
    staged = path.with_suffix(".staged")
    staged.write_bytes(data)
    os.replace(staged, path)


@pytest.mark.asyncio
async def test_rotation_under_load_fails_no_request(server: Running):
    """A client keeps opening fresh connections while the pair is rotated twice: once file by file in
    place (the poller sees a mismatched pair for a while), once atomically. Every request succeeds, and
    every connection sees the certificate that was current when it started, or a newer one."""
    tls = server.webhook.tls
    rotations = [server.pki.issue("second"), server.pki.issue("third")]
    order = [tls.info.serial, *(_pem_serial(p.cert_pem) for p in rotations)]
    seen: list[tuple[int, int]] = []  # (index of the serial current before connecting, index seen)
    failures: list[BaseException] = []
    done = asyncio.Event()

    port = int(server.url.rsplit(":", 1)[1])

    async def client(name: str) -> None:
        i = 0
        while not done.is_set():
            i += 1
            before = order.index(tls.info.serial)
            try:
                connection = await Connection.open(port, server.pki)  # a fresh connection every time
                status, answer = await connection.validate(admission_review(uid=f"{name}-{i}"))
                connection.close()
                assert (status, answer["response"]["uid"]) == (200, f"{name}-{i}")
            except Exception as exc:
                failures.append(exc)
                continue
            seen.append((before, order.index(connection.serial)))

    clients = [asyncio.create_task(client(f"c{n}")) for n in range(3)]
    await asyncio.sleep(0.3)
    second, third = rotations
    server.pki.cert_file.write_bytes(second.cert_pem)
    await asyncio.sleep(0.3)  # several polls see the new certificate with the old key
    server.pki.key_file.write_bytes(second.key_pem)
    await _until(lambda: tls.info.serial == order[1])
    await asyncio.sleep(0.3)
    _replace_atomically(server.pki.key_file, third.key_pem)
    _replace_atomically(server.pki.cert_file, third.cert_pem)
    await _until(lambda: tls.info.serial == order[2])
    await asyncio.sleep(0.3)
    done.set()
    await asyncio.gather(*clients)

    assert failures == []
    assert tls.reloads == 2
    assert tls.failures >= 1, "the poller saw the half-rotated pair and kept the old one"
    assert len(seen) > 30
    assert all(served >= before for before, served in seen), "no connection got an older certificate"
    assert {served for _, served in seen} == {0, 1, 2}
    assert seen[-1][1] == 2
