"""A TLS server context whose certificate and key follow the files on disk, without a restart.

Kubernetes rotates a mounted Secret by swapping a symlink, so no file event or mtime can be trusted;
like kopf we re-read both files (a few KiB) on every poll and compare their bytes. A changed pair is
loaded into a *fresh* ``ssl.SSLContext``; ``load_cert_chain`` checks that the key matches the certificate,
so an inconsistent pair (a rotation seen half-way, a truncated file) fails there and the old pair keeps
serving. The listening context never changes: its SNI callback, which OpenSSL calls on every ClientHello
whether or not the client sent a server name, hands each new connection the current context (Go's
``tls.Config.GetCertificate``, which controller-runtime's certwatcher uses). Connections already open keep
the certificate they were set up with, so a rotation fails no request.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

DEFAULT_CHECK_INTERVAL: Final = 1.0
"""Seconds between two reads of the files: a rotation is picked up within about this long."""

log = logging.getLogger(__name__)


class CertificateLoadError(RuntimeError):
    """The certificate or key cannot be read or loaded, or they do not belong together."""


@dataclass(frozen=True)
class CertificateInfo:
    """What the logs and metrics say about the certificate being served."""

    subject: str
    serial: int
    not_after: dt.datetime
    sha256: str

    def expired(self, now: dt.datetime | None = None) -> bool:
        return (now or dt.datetime.now(dt.UTC)) >= self.not_after


def server_context(minimum_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2) -> ssl.SSLContext:
    """A bare TLS server context: TLS 1.2 or later, no session resumption."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = minimum_version
    # A resumed session skips the certificate, so a client could go on trusting the old one after a
    # rotation; the API server does not resume sessions anyway.
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    return context


class ReloadingServerContext:
    """``context`` serves the pair in ``cert_file`` and ``key_file`` as it is now on disk.

    Construction loads the pair or raises CertificateLoadError. Then either await ``watch()`` (polls every
    ``interval`` seconds until cancelled) or call ``check()`` yourself. Both run on the event loop's thread,
    which is the thread that performs the handshakes, so a swap never races a handshake.
    """

    def __init__(
        self,
        cert_file: str | Path,
        key_file: str | Path,
        *,
        interval: float = DEFAULT_CHECK_INTERVAL,
        minimum_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.interval = interval
        self._minimum_version = minimum_version
        self.reloads = 0
        """Pairs loaded after the first one."""
        self.failures = 0
        """Changed pairs that could not be loaded (the previous one kept serving)."""
        seen = self._read()
        if isinstance(seen, str):
            raise CertificateLoadError(seen)
        loaded = self._load(seen)
        if isinstance(loaded, str):
            raise CertificateLoadError(loaded)
        self._current, self.info = loaded
        self._seen: tuple[bytes, bytes] | str = seen
        # The listening context holds no pair of its own: its callback picks one for every handshake.
        self.context = server_context(minimum_version)
        self.context.sni_callback = self._select
        log.info("serving certificate %s", _describe(self.info))

    @property
    def not_after_timestamp(self) -> float:
        return self.info.not_after.timestamp()

    def _select(self, connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        connection.context = self._current

    def check(self) -> bool:
        """Load the pair if it changed and is consistent; True when a new pair is now served."""
        seen = self._read()
        if seen == self._seen:
            return False
        if isinstance(seen, str):
            return self._keep(seen, seen)
        loaded = self._load(seen)
        if isinstance(loaded, str):
            return self._keep(seen, loaded)
        if self._read() != seen:
            # The files changed while loading: what was loaded may be a mix. The next poll tries again.
            return False
        self._seen = seen
        self._current, self.info = loaded
        self.reloads += 1
        log.info("certificate reloaded: now serving %s", _describe(self.info))
        return True

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:  # never let a surprise stop the rotation for the life of the process
                log.exception("certificate check failed; will retry")

    def _keep(self, seen: tuple[bytes, bytes] | str, problem: str) -> bool:
        # Remember what was seen so a pair that stays broken is logged (and counted) once, not every poll.
        self._seen = seen
        self.failures += 1
        log.error("keeping the current certificate (%s): %s", _describe(self.info), problem)
        return False

    def _read(self) -> tuple[bytes, bytes] | str:
        try:
            return self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as exc:
            return f"cannot read the certificate or key: {exc}"

    def _load(self, pair: tuple[bytes, bytes]) -> tuple[ssl.SSLContext, CertificateInfo] | str:
        context = server_context(self._minimum_version)
        try:
            # Checks that the key matches the certificate; a failure leaves this scratch context unused.
            context.load_cert_chain(self.cert_file, self.key_file)
            info = certificate_info(pair[0])
        except (ssl.SSLError, OSError, ValueError) as exc:
            return f"cannot load {self.cert_file} and {self.key_file}: {exc}"
        return context, info


def certificate_info(cert_pem: bytes) -> CertificateInfo:
    """The first (leaf) certificate of a PEM chain, described."""
    cert = x509.load_pem_x509_certificates(cert_pem)[0]
    der = cert.public_bytes(Encoding.DER)
    return CertificateInfo(
        subject=cert.subject.rfc4514_string(),
        serial=cert.serial_number,
        not_after=cert.not_valid_after_utc,
        sha256=hashlib.sha256(der).hexdigest(),
    )


def _describe(info: CertificateInfo) -> str:
    return f"{info.subject} serial {info.serial:x} not after {info.not_after.isoformat()}"
