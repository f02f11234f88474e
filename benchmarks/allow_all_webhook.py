"""An admission webhook that allows everything at once: the floor of being a webhook at all.

    .venv/bin/python -m benchmarks.allow_all_webhook --port P --tls-cert-file C --tls-private-key-file K
    (started by benchmarks/webhook_apiserver_bench.py, registered with dispatch's own configurations)

The same server stack as dispatch's webhook (aiohttp over TLS, one process on loopback) answering every
review ``allowed`` without reading it beyond its uid. What the API server spends calling it (its TLS client,
encoding the review, the round trip) is what any webhook costs; what dispatch's webhook adds over this is
its own work (decoding, the rules, the runtime copy from memory).
"""

from __future__ import annotations

import argparse
import json

from aiohttp import web

from serving.tls import server_context


async def review(request: web.Request) -> web.Response:
    body = json.loads(await request.read())
    answer = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": body["request"]["uid"], "allowed": True},
    }
    return web.json_response(answer)


async def ready(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-private-key-file", required=True)
    args = parser.parse_args()
    context = server_context()  # as dispatch's webhook serves (TLS 1.2 and up)
    context.load_cert_chain(args.tls_cert_file, args.tls_private_key_file)
    app = web.Application()
    app.add_routes([web.post("/validate", review), web.post("/mutate", review), web.get("/readyz", ready)])
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=context, print=None, access_log=None)


if __name__ == "__main__":
    main()
