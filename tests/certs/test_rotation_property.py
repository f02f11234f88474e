"""Property: whatever the interleaving of replicas, the clock and a helm upgrade blanking the caBundle, the
certificate every replica serves verifies against the bundle injected into every webhook configuration.

A model of the API server (a Secret and two webhook configurations, each with a resourceVersion) and of
replicas running the controller's pass in its real pieces, which hypothesis interleaves at will:

- ``read``: the replica reads the Secret and the configurations (its view may then go stale);
- ``write``: it decides on that view at its own clock (skewed up to half an hour) and writes the Secret
  with the resourceVersion it read; a stale view gets 409 and is dropped, as the controller re-reads;
- ``inject``: it reads the Secret and sets the bundle on every configuration (the controller injects right
  after reading, so the model makes it one step); injection may be *broken* for up to two days (RBAC
  removed, the API server refusing the patch), which is what the "promote only once injected" rule is for;
- ``serve``: it writes the served files from its view: its servers now serve that leaf;
- ``blank``: a helm upgrade (or anyone) blanks a configuration's caBundle.

Fairness, the one assumption: a replica acts on a view no older than ``FRESH`` (the controller's watch and
resync make it seconds); a "quiet" clock jump first lets every replica finish a full pass. The lifetimes
are scaled down (a 30-day CA) so a few dozen steps cross several rotations; settle and overlap stay longer
than FRESH, as in production, where they are an hour and a day against seconds.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certs import contents
from certs import lifecycle as lc

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)
POLICY = lc.Policy(
    dns_names=lc.service_dns_names("dispatch-k8s", "dispatch-system"),
    ca_validity=dt.timedelta(days=30),
    serving_validity=dt.timedelta(days=9),
    settle=dt.timedelta(hours=1),
    overlap=dt.timedelta(hours=6),
)
FRESH = dt.timedelta(minutes=30)
QUIET_MAX = dt.timedelta(days=3)
"""The longest quiet jump: a third of the serving life, the margin between renewal and expiry."""
BROKEN_MAX = dt.timedelta(days=2)
CONFIGURATIONS = ("validating", "mutating")


@functools.lru_cache(maxsize=4096)
def _verifies(leaf: bytes, bundle: bytes, now: dt.datetime) -> bool:
    # contents.verifies is pure; the cache only saves the test's time (the same check recurs within a pass).
    return contents.verifies(leaf, bundle, now)


@dataclass
class View:
    rv: int
    data: dict[str, bytes]
    injected: bool
    read_at: dt.datetime


@dataclass
class Replica:
    skew: dt.timedelta
    view: View | None = None
    served: bytes | None = None
    served_from: dt.datetime | None = None
    """When the view behind ``served`` was read."""


@dataclass
class World:
    replicas: list[Replica]
    now: dt.datetime = T0
    rv: int = 1
    secret: dict[str, bytes] = field(default_factory=dict)
    bundles: dict[str, bytes] = field(default_factory=lambda: dict.fromkeys(CONFIGURATIONS, b""))
    conflicts: int = 0
    writes: list[str] = field(default_factory=list)
    broken_until: dt.datetime = T0
    _parsed: dict[tuple, contents.Material] = field(default_factory=dict)

    def parse(self, data: dict[str, bytes]) -> contents.Material:
        # parse is pure; caching it only saves the test's time.
        key = tuple(sorted(data.items()))
        if key not in self._parsed:
            self._parsed[key] = contents.parse(data)
        return self._parsed[key]

    # --- the pieces of a pass -----------------------------------------------------------------------

    def read(self, r: Replica) -> None:
        material = self.parse(self.secret)
        injected = all(b == contents.trust_bundle(material) for b in self.bundles.values())
        r.view = View(self.rv, dict(self.secret), injected, self.now)

    def write(self, r: Replica) -> None:
        if r.view is None:
            return
        material = self.parse(r.view.data)
        clock = self.now + r.skew
        plan = lc.decide(material, POLICY, clock, injected=r.view.injected)
        if not plan:
            return
        if r.view.rv != self.rv:
            self.conflicts += 1  # 409: the controller re-reads
            r.view = None
            return
        after = lc.carry_out(material, plan, POLICY, clock)
        self.secret, self.rv = after.data(), self.rv + 1
        self.writes.append(plan.describe())
        r.view = View(self.rv, dict(self.secret), False, self.now)
        self.check()

    def inject(self, r: Replica) -> None:
        if self.now < self.broken_until:
            return
        bundle = contents.trust_bundle(self.parse(self.secret))
        self.bundles = dict.fromkeys(CONFIGURATIONS, bundle)
        self.check()

    def serve(self, r: Replica) -> None:
        if r.view is None:
            return
        files = lc.served_files(self.parse(r.view.data))
        if files is not None:
            r.served, r.served_from = files["tls.crt"], r.view.read_at
            self.check()

    def full_pass(self, r: Replica) -> None:
        for _ in range(10):
            self.read(r)
            rv = self.rv
            self.write(r)
            if r.view is not None and (self.rv == rv or r.view.rv == self.rv):
                break
        self.inject(r)
        self.read(r)
        self.serve(r)

    # --- the clock ----------------------------------------------------------------------------------

    def advance(self, by: dt.timedelta) -> None:
        for r in self.replicas:
            # Fairness: nobody serves from a view older than FRESH.
            if r.view is None or r.served_from is None or self.now + by - r.served_from > FRESH:
                self.full_pass(r)
        self.now += by

    # --- the property, checked after every step that changes what is served or trusted ---------------

    def check(self) -> None:
        for name, bundle in self.bundles.items():
            if not bundle:
                continue  # blanked by a helm upgrade and not re-injected yet: nothing can verify
            for i, r in enumerate(self.replicas):
                if r.served is not None:
                    assert _verifies(r.served, bundle, self.now), (
                        f"replica {i}'s certificate does not verify against {name}'s bundle at {self.now}; "
                        f"writes: {self.writes}"
                    )


def _seconds(s: int) -> dt.timedelta:
    return dt.timedelta(seconds=s)


small = st.integers(min_value=0, max_value=int(FRESH.total_seconds())).map(lambda s: ("small", dt.timedelta(seconds=s)))
# Short quiet spells matter as much as long ones: a settle is an hour, a broken injection up to two days.
quiet = st.one_of(st.integers(0, 2 * 3600), st.integers(0, int(QUIET_MAX.total_seconds()))).map(
    lambda s: ("quiet", dt.timedelta(seconds=s))
)
REPLICAS = 3
act = st.tuples(st.sampled_from(["read", "write", "inject", "serve"]), st.integers(0, REPLICAS - 1))
blank = st.sampled_from(CONFIGURATIONS).map(lambda c: ("blank", c))
broken = st.one_of(st.just(BROKEN_MAX), st.integers(0, int(BROKEN_MAX.total_seconds())).map(_seconds)).map(
    lambda d: ("break", d)
)
events = st.lists(st.one_of(small, quiet, act, act, act, blank, broken), min_size=5, max_size=60)
skews = st.lists(st.integers(-30, 30).map(lambda m: m * MINUTE), min_size=REPLICAS, max_size=REPLICAS)


def run(world: World, script: list) -> None:
    for event in script:
        kind, arg = event
        if kind == "small":
            world.advance(arg)
        elif kind == "quiet":
            for r in world.replicas:
                world.full_pass(r)
            world.advance(arg)
        elif kind == "blank":
            world.bundles[arg] = b""
        elif kind == "break":
            world.broken_until = world.now + arg
        else:
            getattr(world, kind)(world.replicas[arg])
        world.check()


DAY = 86400
# A live system stages a new CA at 2/3 of the old one's life (day 20 here), so an installed CA is younger.
ages = st.one_of(
    st.just(None),  # an empty Secret: the replicas race to fill it
    st.integers(0, 20 * DAY),
    st.integers(int(19.9 * DAY), 20 * DAY),  # about to stage a new CA
).map(lambda s: None if s is None else dt.timedelta(seconds=s))


def installed(age: dt.timedelta | None, skew: list[dt.timedelta]) -> World:
    """A world whose CA is ``age`` old (its serving certificate current), injected and served everywhere."""
    world = World([Replica(s) for s in skew])
    if age is not None:
        born = T0 - age
        material = lc.carry_out(
            contents.Material(), lc.decide(contents.Material(), POLICY, born, injected=True), POLICY, born
        )
        leaf_at = T0 - dt.timedelta(seconds=age.total_seconds() % (5 * DAY))
        material = lc.carry_out(material, lc.Plan(((lc.Step.ISSUE, "current"),)), POLICY, leaf_at)
        world.secret = material.data()
        world.inject(world.replicas[0])
        for r in world.replicas:
            world.read(r)
            world.serve(r)
    return world


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=events, skew=skews, age=ages)
def test_served_certificates_always_verify_against_the_injected_bundle(script, skew, age):
    world = installed(age, skew)
    world.check()
    run(world, script)
    world.broken_until = world.now
    # And they converge: after two quiet passes everyone serves the one certificate of the Secret, the
    # configurations carry its bundle, and nobody wants to change anything.
    for _ in range(2):
        for r in world.replicas:
            world.full_pass(r)
    material = world.parse(world.secret)
    assert {r.served for r in world.replicas} == {material.serving.cert_pem}
    assert set(world.bundles.values()) == {contents.trust_bundle(material)}
    for r in world.replicas:
        assert not lc.decide(material, POLICY, world.now + r.skew, injected=True), "converged: nothing to do"
    world.check()


def test_a_long_run_crosses_several_ca_rotations():
    """A fixed script, so the model is known to reach the interesting states: 70 days of three replicas
    taking turns, with a blanked bundle and a broken injection now and then."""
    world = World([Replica(dt.timedelta(0)), Replica(10 * MINUTE), Replica(-20 * MINUTE)])
    script: list = []
    for i in range(70 * 4):  # 70 days in 6-hour steps
        script += [("read", i % 3), ("read", (i + 1) % 3), ("write", (i + 1) % 3), ("write", i % 3)]
        script += [("inject", (i + 2) % 3), ("serve", i % 3), ("small", dt.timedelta(minutes=29))]
        if i % 25 == 0:
            script.append(("blank", "mutating"))
        if i % 40 == 0:
            script.append(("break", dt.timedelta(hours=30)))
        script.append(("quiet", dt.timedelta(hours=5, minutes=31)))
    run(world, script)
    joined = " | ".join(world.writes)
    assert joined.count("stage:") >= 3
    assert joined.count("promote:") >= 3
    assert joined.count("drop-previous:") >= 3
    assert world.conflicts > 0
