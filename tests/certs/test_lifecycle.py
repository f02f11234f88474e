"""Every decision of the certificate lifecycle, at chosen times (an injected clock; nothing sleeps)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509

from certs import contents, pki
from certs import lifecycle as lc
from certs.contents import Material
from certs.lifecycle import Policy, Step

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
NAMES = lc.service_dns_names("dispatch-k8s", "dispatch-system")
POLICY = Policy(dns_names=NAMES)


def steps(material: Material, now: dt.datetime, *, injected: bool = True, policy: Policy = POLICY) -> list[Step]:
    return [s for s, _ in lc.decide(material, policy, now, injected=injected).steps]


def advance(material: Material, now: dt.datetime, *, injected: bool = True, policy: Policy = POLICY) -> Material:
    return lc.carry_out(material, lc.decide(material, policy, now, injected=injected), policy, now)


def fresh(now: dt.datetime = T0, policy: Policy = POLICY) -> Material:
    return advance(Material(), now, policy=policy)


def cert(pem: bytes) -> x509.Certificate:
    return pki.load_certificate(pem)


def staged(now: dt.datetime = T0) -> tuple[Material, dt.datetime]:
    """A material whose CA rotation has just been staged, and the time of staging."""
    m = fresh(now)
    due = contents.renewal_due_at(m.ca.cert, POLICY.renew_at)
    m = advance(m, due - DAY)  # a young serving certificate, so only the CA is due
    assert steps(m, due) == [Step.STAGE]
    return advance(m, due), due


def promoted() -> tuple[Material, Material, dt.datetime]:
    """(before, after) the switch to the staged CA, and the time of the switch."""
    before, at = staged()
    at += POLICY.settle
    return before, advance(before, at), at


# --- lifetimes -------------------------------------------------------------------------------------------


def test_chosen_lifetimes_are_consistent():
    assert POLICY.ca_validity == dt.timedelta(days=365)
    assert POLICY.serving_validity == dt.timedelta(days=90)
    left_after_staging = lc.CA_VALIDITY * (1 - lc.RENEW_AT)
    assert left_after_staging > lc.SERVING_VALIDITY, "a serving certificate is never cut short by its CA"
    assert left_after_staging / 10 > lc.SETTLE + lc.OVERLAP, "a rotation completes long before the old CA expires"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dns_names": ()},
        {"renew_at": 1.0},
        {"renew_at": 0.0},
        {"serving_validity": dt.timedelta(0)},
        {"settle": -HOUR},
        {"ca_validity": dt.timedelta(days=3)},  # settle + overlap exceed a third of it
        {"serving_validity": dt.timedelta(days=1)},  # the overlap outlasts the serving renewal interval
    ],
)
def test_policy_refuses_inconsistent_settings(kwargs):
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        Policy(**{"dns_names": NAMES, **kwargs})


def test_service_names():
    assert lc.service_dns_names("svc", "ns") == ("svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.cluster.local")


# --- from empty ----------------------------------------------------------------------------------------


def test_an_empty_secret_gets_a_ca_and_a_serving_certificate():
    assert steps(Material(), T0) == [Step.NEW_CA, Step.ISSUE]
    m = fresh()
    assert m.ca
    assert m.serving
    assert m.next_ca is None
    assert m.previous_ca is None
    leaf = m.serving.cert
    assert contents.signed_by(leaf, m.ca.cert)
    assert contents.sans(leaf) == (set(NAMES), set())
    assert leaf.not_valid_before_utc == T0 - contents.BACKDATE
    assert leaf.not_valid_after_utc == T0 + lc.SERVING_VALIDITY
    assert m.ca.cert.not_valid_after_utc == T0 + lc.CA_VALIDITY
    assert m.ca.cert.subject.rfc4514_string().startswith("CN=dispatch-k8s-ca@")
    for name in NAMES:
        assert contents.verifies(m.serving.cert_pem, contents.trust_bundle(m), T0, name)
    assert steps(m, T0) == [], "what was just made satisfies the decision: it is stable"


def test_ip_addresses_are_served_too():
    policy = Policy(dns_names=("localhost",), ip_addresses=("127.0.0.1",))
    m = fresh(policy=policy)
    assert contents.sans(m.serving.cert) == ({"localhost"}, {"127.0.0.1"})
    only_ip = fresh(policy=Policy(dns_names=(), ip_addresses=("127.0.0.1",)))
    assert contents.verifies(only_ip.serving.cert_pem, contents.trust_bundle(only_ip), T0)


# --- the serving certificate --------------------------------------------------------------------------


def test_serving_certificate_renewed_at_two_thirds_of_its_life():
    m = fresh()
    due = contents.renewal_due_at(m.serving.cert, POLICY.renew_at)
    assert T0 + 59 * DAY < due < T0 + 61 * DAY
    assert steps(m, due - dt.timedelta(seconds=1)) == []
    assert steps(m, due) == [Step.ISSUE]
    renewed = advance(m, due)
    assert renewed.ca == m.ca, "renewing the leaf leaves the CA alone"
    assert renewed.serving != m.serving
    assert contents.signed_by(renewed.serving.cert, m.ca.cert)
    assert contents.trust_bundle(renewed) == contents.trust_bundle(m), "no re-injection for a leaf renewal"


def test_an_expired_serving_certificate_is_replaced():
    m = fresh()
    why = lc.serving_problem(m, POLICY, m.serving.cert.not_valid_after_utc)
    assert why
    assert "expired" in why


def test_a_serving_certificate_missing_a_wanted_name_is_reissued_with_both_sets_of_names():
    m = fresh()
    renamed = Policy(dns_names=lc.service_dns_names("dispatch", "dispatch-system"))
    assert "lacks dispatch" in lc.serving_problem(m, renamed, T0 + HOUR)
    new = advance(m, T0 + HOUR, policy=renamed)
    dns, _ = contents.sans(new.serving.cert)
    assert dns == set(NAMES) | set(renamed.dns_names), "old and new replicas of a rolling upgrade both satisfied"
    assert steps(new, T0 + HOUR) == []
    assert steps(new, T0 + HOUR, policy=renamed) == []


def test_a_serving_certificate_not_signed_by_the_ca_is_reissued():
    m = fresh()
    other = pki.make_serving_cert(pki.make_ca("someone", now=T0), "x", dns_names=NAMES, now=T0)
    swapped = Material(ca=m.ca, serving=contents.KeyedCert(other.cert_pem, other.key_pem))
    assert steps(swapped, T0) == [Step.ISSUE]


# --- the CA: staging, promotion, overlap ---------------------------------------------------------------


def test_ca_rotation_is_staged_at_two_thirds_of_its_life_without_touching_the_leaf():
    m = fresh()
    due = contents.renewal_due_at(m.ca.cert, POLICY.renew_at)
    assert T0 + 243 * DAY < due < T0 + 244 * DAY
    # Keep the leaf young so only the CA is due.
    m = advance(m, due - DAY)
    assert steps(m, due - dt.timedelta(seconds=1)) == []
    assert steps(m, due) == [Step.STAGE]
    s = advance(m, due)
    assert s.ca == m.ca
    assert s.serving == m.serving
    assert s.next_ca is not None
    assert contents.trusted_cas(s) == [m.ca.cert, s.next_ca.cert], "both trusted, oldest first"
    assert contents.verifies(s.serving.cert_pem, contents.trust_bundle(s), due), "the served leaf still verifies"


def test_promotion_waits_for_injection_and_settle():
    m, at = staged()
    settled = at + POLICY.settle
    assert steps(m, settled - dt.timedelta(seconds=1), injected=True) == []
    assert steps(m, settled + 30 * DAY, injected=False) == [], "never before the bundle with both CAs is injected"
    assert steps(m, settled, injected=True) == [Step.PROMOTE, Step.ISSUE]
    assert lc.next_decision_at(m, POLICY, at) == settled


def test_promotion_switches_the_signer_and_keeps_the_old_ca_trusted():
    before, after, at = promoted()
    assert after.ca == before.next_ca
    assert after.previous_ca == before.ca.cert_pem
    assert after.next_ca is None
    assert contents.signed_by(after.serving.cert, before.next_ca.cert)
    assert contents.trust_bundle(after) == contents.trust_bundle(before), (
        "the bundle is unchanged: nothing to re-inject"
    )
    old_leaf = before.serving.cert_pem
    for leaf in (old_leaf, after.serving.cert_pem):
        assert contents.verifies(leaf, contents.trust_bundle(after), at), "replicas not yet reloaded still verify"


def test_previous_ca_dropped_after_the_overlap():
    _, m, at = promoted()
    end = contents.issued_at(m.serving.cert) + POLICY.overlap
    assert end == at + POLICY.overlap
    assert steps(m, end - dt.timedelta(seconds=1)) == []
    assert lc.next_decision_at(m, POLICY, at) == end
    assert steps(m, end) == [Step.DROP_PREVIOUS]
    dropped = advance(m, end)
    assert dropped.previous_ca is None
    assert contents.trusted_cas(dropped) == [m.ca.cert]


def test_previous_ca_kept_while_the_serving_certificate_is_not_from_the_current_ca():
    _, m, at = promoted()
    # Someone restored a leaf of the previous CA: the overlap restarts with the next re-issue, never shortens.
    stale = Material(ca=m.ca, previous_ca=m.previous_ca, serving=staged()[0].serving)
    assert steps(stale, at + 2 * POLICY.overlap) == [Step.ISSUE]


def test_an_expired_previous_ca_is_dropped():
    _, m, _ = promoted()
    assert steps(m, cert(m.previous_ca).not_valid_after_utc)[0] == Step.DROP_PREVIOUS


def test_an_expired_staged_ca_is_staged_again():
    old, _ = staged()
    late = old.next_ca.cert.not_valid_after_utc
    current = fresh(late - DAY)
    m = Material(ca=current.ca, next_ca=old.next_ca, serving=current.serving)
    assert steps(m, late) == [Step.STAGE]
    assert advance(m, late).next_ca != old.next_ca


def test_an_expired_ca_is_replaced_at_once_and_a_staged_one_takes_over_first():
    m = fresh()
    end = m.ca.cert.not_valid_after_utc
    assert steps(m, end) == [Step.NEW_CA, Step.ISSUE]
    s, _ = staged()
    assert steps(s, end, injected=False) == [Step.PROMOTE, Step.ISSUE], "the staged CA is already trusted"


def test_a_ca_whose_key_does_not_match_is_replaced():
    m = fresh()
    other = pki.make_ca("x")
    broken = contents.parse({**m.data(), contents.CA_KEY: other.key_pem})
    assert broken.ca is None
    assert "does not belong" in broken.problems[0]
    assert steps(broken, T0) == [Step.NEW_CA, Step.ISSUE]


# --- parsing and the Secret write ----------------------------------------------------------------------


def test_parse_round_trips_and_sets_aside_what_is_broken():
    _, m, _ = promoted()
    assert contents.parse(m.data()) == m
    broken = contents.parse(
        {contents.TLS_CERT: b"garbage", contents.TLS_KEY: b"garbage", contents.PREVIOUS_CA_CERT: m.serving.cert_pem}
    )
    assert broken == Material()
    assert len(broken.problems) == 2
    assert contents.parse({contents.CA_CERT: m.ca.cert_pem}).problems == ("ca.crt and ca.key must both be present",)
    leaf_as_ca = contents.parse({contents.CA_CERT: m.serving.cert_pem, contents.CA_KEY: m.serving.key_pem})
    assert "is not a CA" in leaf_as_ca.problems[0]


def test_decode_secret_data():
    assert contents.decode_secret_data({"a": base64.b64encode(b"x").decode(), "b": "!!", "c": ""}) == {
        "a": b"x",
        "c": b"",
    }
    assert contents.decode_secret_data(None) == {}


def test_secret_patch_carries_the_resource_version_and_touches_only_our_keys():
    before, after, _ = promoted()
    raw = {**before.data(), "unrelated": b"kept"}
    patch = lc.secret_patch("42", raw, after)
    assert patch["metadata"] == {"resourceVersion": "42"}
    data = patch["data"]
    assert (data[contents.NEXT_CA_CERT], data[contents.NEXT_CA_KEY]) == (None, None), "removed keys are nulled"
    assert base64.b64decode(data[contents.CA_CERT]) == before.next_ca.cert_pem
    assert base64.b64decode(data[contents.PREVIOUS_CA_CERT]) == before.ca.cert_pem
    assert "unrelated" not in data
    assert lc.secret_patch("43", after.data(), after)["data"] == {}, "nothing unchanged is rewritten"


def test_served_files():
    assert lc.served_files(Material()) is None
    m, _ = staged()
    files = lc.served_files(m)
    assert files == {"tls.crt": m.serving.cert_pem, "tls.key": m.serving.key_pem, "ca.crt": contents.trust_bundle(m)}
    assert len(x509.load_pem_x509_certificates(files["ca.crt"])) == 2


# --- the bundle ----------------------------------------------------------------------------------------


def test_the_bundle_is_a_function_of_the_secret_alone():
    before, after, _ = promoted()
    assert contents.trust_bundle(before) == contents.trust_bundle(after)
    assert contents.trust_bundle(Material()) == b""
    assert [c.serial_number for c in contents.bundle_certificates(contents.trust_bundle(after))] == [
        before.ca.cert.serial_number,
        before.next_ca.cert.serial_number,
    ]
    assert contents.bundle_certificates(b"not pem") == []


def test_verifies_checks_chain_time_and_name():
    m = fresh()
    bundle = contents.trust_bundle(m)
    assert contents.verifies(m.serving.cert_pem, bundle, T0, "dispatch-k8s.dispatch-system.svc")
    assert not contents.verifies(m.serving.cert_pem, bundle, T0, "elsewhere.svc")
    assert not contents.verifies(m.serving.cert_pem, bundle, T0 + 91 * DAY)
    assert not contents.verifies(m.serving.cert_pem, contents.trust_bundle(fresh()), T0), "another CA"
    assert not contents.verifies(m.serving.cert_pem, b"", T0)


# --- the timer ----------------------------------------------------------------------------------------


def test_next_decision_is_the_earliest_deadline():
    m = fresh()
    assert lc.next_decision_at(Material(), POLICY, T0) is None
    assert lc.next_decision_at(m, POLICY, T0) == contents.renewal_due_at(m.serving.cert, POLICY.renew_at)
    t = T0
    # Following the timer alone walks through 500 days, two CA rotations, and nothing is missed.
    seen: list[Step] = []
    while t < T0 + 500 * DAY:
        seen += steps(m, t)
        m = advance(m, t)
        assert contents.verifies(m.serving.cert_pem, contents.trust_bundle(m), t)
        t = lc.next_decision_at(m, POLICY, t)
    assert seen.count(Step.STAGE) == seen.count(Step.PROMOTE) == seen.count(Step.DROP_PREVIOUS) == 2
    assert seen.count(Step.ISSUE) >= 8


# --- convergence between replicas ---------------------------------------------------------------------


def test_the_loser_of_a_race_accepts_the_winners_certificate():
    # Both replicas read the empty Secret and make their own; the API server takes one write and refuses the
    # other (409). The loser re-reads and finds nothing to do: one certificate for everyone.
    mine, theirs = fresh(), fresh()
    assert mine.ca != theirs.ca
    assert steps(contents.parse(theirs.data()), T0 + dt.timedelta(seconds=1)) == []


@pytest.mark.parametrize("skew", [-50 * 60, -60, 60, 50 * 60], ids=["-50m", "-1m", "+1m", "+50m"])
def test_replicas_with_skewed_clocks_accept_each_others_certificates(skew):
    # notBefore is backdated an hour, and only notAfter counts for "usable": a replica whose clock lags the
    # issuer's does not throw away a certificate it sees as not yet valid.
    m = fresh()
    assert steps(m, T0 + dt.timedelta(seconds=skew)) == []


def test_racing_rotations_converge_on_the_first_stage():
    m = fresh()
    due = contents.renewal_due_at(m.ca.cert, POLICY.renew_at)
    m = advance(m, due - DAY)
    winner = advance(m, due)
    assert steps(winner, due + dt.timedelta(minutes=5), injected=False) == [], "the loser waits for the winner's CA"


def test_one_rotation_at_a_time_even_after_a_late_promotion():
    # The CA lifetime was cut from a year to six hours, and injection was refused for most of the new CA's
    # first two thirds, so its promotion came late: it is due again before the previous CA's overlap is over.
    # The next rotation waits for the drop, so a promotion never pushes a previous CA out early.
    m = fresh()
    short = Policy(dns_names=NAMES, ca_validity=6 * HOUR, serving_validity=3 * HOUR, overlap=HOUR, settle=HOUR / 60)
    staging = contents.renewal_due_at(m.ca.cert, POLICY.renew_at)
    m = advance(advance(m, staging - DAY), staging, policy=short)
    assert m.next_ca is not None
    promotion = staging + 3.5 * HOUR
    assert steps(m, promotion - HOUR, injected=False, policy=short) == []
    m = advance(m, promotion, policy=short)
    assert m.previous_ca is not None
    due = contents.renewal_due_at(m.ca.cert, short.renew_at)
    end = contents.issued_at(m.serving.cert) + short.overlap
    assert promotion < due < end
    assert steps(m, due, policy=short) == [], "due, but the previous CA is still in its overlap"
    assert steps(m, end, policy=short) == [Step.STAGE, Step.DROP_PREVIOUS]
