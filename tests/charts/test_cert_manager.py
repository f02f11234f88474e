"""certs.mode cert-manager as the real helm renders it, and on a real API server with cert-manager's own CRDs
(from its Go module, copied by `controlplane/build.sh cert-manager-crds`): an Issuer and a Certificate for the
Service's names, cainjector's annotation on the webhook configurations, the pods mounting cert-manager's
Secret, and no certificate controller (no container, no empty Secret, no rights). The servers' reload of that
Secret's layout: tests/certs/test_cert_manager_layout.py."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from certs import lifecycle
from harness.binaries import MissingBinaryError, cert_manager_crds
from harness.cluster import ControlPlane
from tests.charts.helm import Rendered, template, template_error
from tests.charts.sets import value_set
from tests.charts.test_on_the_api_server import _release, refused_on_dry_run, service_monitor_crd  # noqa: F401
from tests.charts.test_render import containers, mount_of, parse_args, pod_spec, volume

CM = "cert-manager.io/v1"


def render(values: dict[str, Any] | None = None, **kwargs: Any) -> Rendered:
    return template(values if values is not None else value_set("cert-manager"), **kwargs)


def test_an_issuer_chain_and_a_certificate_for_the_services_names():
    r = render()
    full = r.one("Deployment")["metadata"]["name"]
    issuers = {d["metadata"]["name"]: d["spec"] for d in r.of("Issuer")}
    assert issuers == {f"{full}-selfsigned": {"selfSigned": {}}, f"{full}-ca": {"ca": {"secretName": f"{full}-ca"}}}
    certificates = {d["metadata"]["name"]: d["spec"] for d in r.of("Certificate")}
    ca, serving = certificates[f"{full}-ca"], certificates[f"{full}-serving"]
    assert ca["isCA"] is True
    assert ca["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": f"{full}-selfsigned"}
    assert serving["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": f"{full}-ca"}
    assert serving["secretName"] == f"{full}-tls"
    names = lifecycle.service_dns_names(full, r.namespace, "cluster.local")
    assert serving["dnsNames"] == [*names, "dispatch.example.com"], "the builtin controller's names, and the extra"
    assert serving["usages"] == ["server auth", "digital signature"]
    assert (serving["duration"], serving["renewBefore"]) == ("2160h", "720h")


def test_an_existing_issuer_replaces_the_charts_own_ca():
    issuer = {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "site-ca"}
    r = render({"certs": {"mode": "cert-manager", "certManager": {"issuerRef": issuer}}})
    assert not r.of("Issuer")
    (certificate,) = r.of("Certificate")
    assert certificate["spec"]["issuerRef"] == issuer


def test_cainjector_injects_the_serving_certificates_ca_into_both_configurations():
    r = render()
    full = r.one("Deployment")["metadata"]["name"]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        annotations = r.one(kind)["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": f"{r.namespace}/{full}-serving"}
        assert r.one(kind)["metadata"]["labels"]["app.kubernetes.io/name"] == "dispatch-k8s", "the hook's check"
    builtin = template()
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        assert "annotations" not in builtin.one(kind)["metadata"]


def test_the_servers_read_cert_managers_secret_and_no_certificate_controller_runs():
    r = render()
    full = r.one("Deployment")["metadata"]["name"]
    spec = pod_spec(r)
    assert "initContainers" not in spec
    assert [d["type"] for d in r.of("Secret")] == ["kubernetes.io/service-account-token"], (
        "cert-manager creates its Secret; no empty one (only the webhook's token)"
    )
    assert not [d for d in r.of("ClusterRole") + r.of("Role") if d["metadata"]["name"].endswith("-certs")]
    c = containers(r)
    assert set(c) == {"webhook", "agent"}
    tls = volume(r, "tls")
    assert tls["secret"] == {"secretName": f"{full}-tls", "defaultMode": 0o440}
    assert spec["securityContext"]["fsGroup"] == 65532, "the key is readable by the pod's group only"
    for server in ("webhook", "agent"):
        args = parse_args(c[server])
        assert (args.tls_cert_file, args.tls_private_key_file) == (
            "/run/dispatch/tls/tls.crt",
            "/run/dispatch/tls/tls.key",
        )
        assert mount_of(c[server], args.tls_cert_file)["name"] == "tls"
    monitor = r.one("ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"] == {"name": f"{full}-tls", "key": "ca.crt"}
    # The platform assigning the group: no fsGroup of ours, the files readable by the pod's users.
    r = render({"certs": {"mode": "cert-manager"}, "securityContext": {"runAsGroup": None}})
    assert volume(r, "tls")["secret"]["defaultMode"] == 0o444
    assert "fsGroup" not in pod_spec(r)["securityContext"]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"certs": {"mode": "certmanager"}}, "/certs/mode"),
        ({"certs": {"certManager": {"duration": "90d"}}}, "/certs/certManager/duration"),
        ({"certs": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}}, "name"),
        ({"certs": {"certManager": {"issuer": {}}}}, "issuer"),
    ],
)
def test_the_schema_refuses_bad_cert_manager_values(values, named):
    error = template_error(values)
    assert named in error, error


# --- on the API server ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cert_manager_api(control_plane: ControlPlane) -> None:
    """cert-manager.io's real CRDs (cluster-scoped, left installed: nothing else uses them)."""
    try:
        folder = cert_manager_crds()
    except MissingBinaryError as exc:
        pytest.fail(str(exc), pytrace=False)
    names = []
    for path in sorted(folder.glob("*.yaml")):
        for crd in (d for d in yaml.safe_load_all(path.read_text()) if d):
            control_plane.admin.apply(crd)
            names.append(crd["metadata"]["name"])
    control_plane.wait_crds_established(names)


@pytest.fixture
def lease_namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = control_plane.create_namespace("leases")
    yield name
    control_plane.delete_namespace(name)


@pytest.mark.cluster
@pytest.mark.parametrize(
    "values",
    [
        value_set("cert-manager"),
        {"certs": {"mode": "cert-manager", "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "x"}}}},
        value_set("openshift"),
        {**value_set("openshift"), "certs": {"mode": "cert-manager"}},
    ],
    ids=["cert-manager", "cluster-issuer", "openshift", "openshift-cert-manager"],
)
@pytest.mark.usefixtures("cert_manager_api", "service_monitor_crd")
def test_every_object_passes_a_server_side_dry_run(values, control_plane, namespace):
    r = template(copy.deepcopy(values), release=_release(), namespace=namespace)
    refused = refused_on_dry_run(control_plane, r.docs)
    assert not refused, "\n".join(refused)
    if values.get("certs", {}).get("mode") == "cert-manager":
        assert r.of("Certificate")
