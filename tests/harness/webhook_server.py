"""A minimal HTTPS admission webhook on loopback, to prove the API server really calls webhooks."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from certs import pki

Review = dict[str, Any]
Decide = Callable[[Review], dict[str, Any]]


@dataclass
class WebhookServer:
    url: str
    ca_bundle: str
    reviews: list[Review] = field(default_factory=list)


@contextmanager
def serve_webhook(ca: pki.CertifiedKey, decide: Decide, cert_dir: Path) -> Iterator[WebhookServer]:
    """Serves AdmissionReview v1 at https://127.0.0.1:<port>/; `decide` returns the response body
    fields (allowed, status, patch...), the uid is filled in here."""
    serving = pki.make_serving_cert(ca, "test-webhook", ip_addresses=["127.0.0.1"])
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
    (cert_dir / "tls.key").write_bytes(serving.key_pem)
    reviews: list[Review] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reviews.append(review)
            response = {"uid": review["request"]["uid"], **decide(review)}
            body = json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield WebhookServer(
            url=f"https://127.0.0.1:{server.server_address[1]}/",
            ca_bundle=base64.b64encode(ca.cert_pem).decode(),
            reviews=reviews,
        )
    finally:
        server.shutdown()
        server.server_close()


def json_patch_response(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
    }
