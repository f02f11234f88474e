"""The fault-and-attack campaign (docs/reliability.md).

    scripts/chaos --seed S --duration 10m [--nodes 2] [--jobs N] [--arm dispatch|naive|both|mutant:NAME]

Starts tier B with real worker nodes (tier C) and a system node, installs dispatch from its chart (two
replicas), and runs supervisor traffic, the nemesis and the attacker for the duration; then heals every fault,
reads every job's final Status and runs the independent checker (chaos/checker.py) over the ledger and the
recorded calls. Exit 0 when the dispatch arm has no violation and no attacker write got through (and the naive
arm, when run, was caught), 1 otherwise. `--arm mutant:NAME` runs one mutant (chaos/mutants.py) alone, on a cluster
that runs the mutant's image in place of the product's; exit 0 when the checker caught it by its rule.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

from chaos import campaign, mk_campaign, mk_env, mk_nemesis, mutants, nemesis
from chaos import env as environment
from harness.processes import stop_everything
from harness.sandbox import on_node

DEFAULT_OUT = Path("/var/tmp/dispatch-k8s-chaos")


def duration(text: str) -> float:
    """`90s`, `10m`, `1h`, or seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 10m or 1h")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


def arm_choice(text: str) -> str:
    """dispatch, naive, both, or mutant:NAME of a mutant the campaign can run here."""
    if text in ("dispatch", "naive", "both"):
        return text
    name = text.removeprefix("mutant:")
    found = mutants.BY_NAME.get(name) if text.startswith("mutant:") else None
    if found is None:
        known = ", ".join((*mutants.RUNNABLE, *mutants.ACROSS))
        raise argparse.ArgumentTypeError(f"{text!r}: dispatch, naive, both, or mutant:NAME ({known})")
    if found.needs:
        raise argparse.ArgumentTypeError(f"mutant {name} needs {found.needs}")
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, required=True, help="the seed of the traffic, the faults and the attacks")
    p.add_argument("--duration", type=duration, required=True, help="how long each arm runs (90s, 10m, 1h)")
    p.add_argument("--nodes", type=int, default=2, help="real worker nodes for the trainers (at least 2)")
    p.add_argument("--jobs", type=int, default=8, help="dispatch jobs alive at once")
    arms = (
        "the product (dispatch), a naive check controller in its place (naive), both in turn, or one mutant "
        f"(mutant:NAME, alone; NAME one of {', '.join(mutants.RUNNABLE)}, or with --multicluster one of "
        f"{', '.join(mutants.ACROSS)})"
    )
    p.add_argument("--arm", type=arm_choice, default="dispatch", help=arms)
    p.add_argument("--faults", default="", help=f"a comma-separated subset of the fault menu: {','.join(nemesis.ALL)}")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where run folders go (default {DEFAULT_OUT})")
    p.add_argument("--multicluster", action="store_true",
                   help="the MultiKueue arm: a manager and two workers, each with a real node, and the faults of "
                        f"chaos/mk_nemesis.py ({','.join(mk_nemesis.ALL)}) in --faults")  # fmt: skip
    return p


def mutant_verdict(mutant: mutants.Mutant, result: campaign.Result | None) -> bool:
    """Prints whether the checker caught ``mutant`` by a rule that guards its mechanism; returns it."""
    found = result.violations_by_rule if result is not None else {}
    rules = ", ".join(f"rule {k}: {v}" for k, v in sorted(found.items()))
    good = result is not None and mutants.caught(found, mutant)
    said = " or ".join(str(r) for r in mutant.rules)
    print(f"chaos: mutant {mutant.name} {'caught' if good else 'NOT caught'} by rule {said} "
          f"(violations: {rules or 'none'})")  # fmt: skip
    return good


def main_multicluster(args: argparse.Namespace) -> int:
    """The MultiKueue arm (chaos/mk_campaign.py) alone, on its own three control planes: the product, or one of
    the mutants across clusters (its tree run by the agents)."""
    menu = [f for f in args.faults.split(",") if f] or list(mk_nemesis.ALL)
    unknown = sorted(set(menu) - set(mk_nemesis.ALL))
    name = args.arm.removeprefix("mutant:")
    mutant = mutants.mutant(name) if args.arm.startswith("mutant:") else None
    why = ""
    if unknown:
        why = f"unknown faults {unknown}; the menu is {list(mk_nemesis.ALL)}"
    elif args.arm in ("naive", "both") or (mutant is not None and mutant.arm != mutants.MULTICLUSTER):
        why = f"--arm dispatch or mutant:NAME of {', '.join(mutants.ACROSS)}"
    if why:
        print(f"scripts/chaos --multicluster: {why}", file=sys.stderr)
        return 2
    image, why = on_node.available(kube_proxy=False)  # the trainers reach no Service
    if image is None:
        print(f"scripts/chaos: no real node can run here: {why}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = args.out / f"chaos-mk-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-seed{args.seed}"
    run_dir.mkdir()
    print(f"chaos: MultiKueue arm, seed {args.seed}, {args.duration:.0f}s, {args.jobs} jobs; run folder {run_dir}")
    tree = mutants.make_tree(mutant, run_dir / "tree") if mutant is not None else None
    if mutant is not None:
        print(f"  mutant {mutant.name}: {mutant.mechanism}; the agents run {tree}")
    env = None
    result = None
    try:
        env = mk_env.start(run_dir, image=image, tree=tree)
        print("  clusters: a manager and two workers (tier B each), a real node on each worker, dispatch's agents")
        arm = mutants.arm_name(mutant) if mutant is not None else mk_campaign.ARM
        result = mk_campaign.run_arm(env, seed=args.seed, duration=args.duration, jobs=args.jobs, menu=menu, arm=arm)
        for line in campaign.summary(result):
            print(line)
        if result.report:
            print(result.report)
    except KeyboardInterrupt:
        print("\nchaos: interrupted", file=sys.stderr)
        return 130
    finally:
        if env is not None:
            env.stop()
        stop_everything()
    good = mutant_verdict(mutant, result) if mutant is not None else result is not None and result.ok
    print("chaos: " + ("passed" if good else "FAILED") + f" (run folder {run_dir})")
    return 0 if good else 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.multicluster:
        return main_multicluster(args)
    if args.nodes < 2:
        print("scripts/chaos: --nodes must be at least 2", file=sys.stderr)
        return 2
    if args.arm.startswith("mutant:") and mutants.mutant(args.arm.removeprefix("mutant:")).arm != mutants.ONE_CLUSTER:
        print(f"scripts/chaos: {args.arm} runs on the MultiKueue arm: add --multicluster", file=sys.stderr)
        return 2
    menu = [f for f in args.faults.split(",") if f] or list(nemesis.ALL)
    unknown = sorted(set(menu) - set(nemesis.ALL))
    if unknown:
        print(f"scripts/chaos: unknown faults {unknown}; the menu is {list(nemesis.ALL)}", file=sys.stderr)
        return 2
    image, why = on_node.available()
    if image is None and args.arm.startswith("mutant:") and (why,) == on_node.available_image()[1:]:
        why = ""  # a mutant arm runs its own image (built below), not the product's
    if image is None and why:
        print(f"scripts/chaos: no real node can run here: {why}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = args.out / f"chaos-{stamp}-seed{args.seed}"
    run_dir.mkdir()
    print(f"chaos: seed {args.seed}, {args.duration:.0f}s per arm, {args.nodes} real worker nodes, {args.jobs} jobs")
    print(f"  run folder {run_dir}")
    mutant = mutants.mutant(args.arm.removeprefix("mutant:")) if args.arm.startswith("mutant:") else None
    arms = ["dispatch", "naive"] if args.arm == "both" else [args.arm]
    env: environment.Env | None = None
    results: list[campaign.Result] = []
    try:
        disarm = None
        if mutant is not None:
            arms = [mutants.arm_name(mutant)]
            work = run_dir / arms[0] / "image"
            image = mutants.build_image(mutant, work)
            print(f"  mutant {mutant.name}: {mutant.mechanism}; image {image.ref} from {work / 'tree'}")
            disarm = lambda: mutants.disarm(env.admin, mutant, work / "tree")  # noqa: E731
        env = environment.start(run_dir, workers=args.nodes, image=image)
        print(f"  cluster: tier B, {args.nodes + 1} real nodes, dispatch {env.helm_version} install (2 replicas)")
        for arm in arms:
            results.append(campaign.run_arm(env, arm=arm, seed=args.seed, duration=args.duration, jobs=args.jobs,
                                            menu=menu, disarm=disarm))  # fmt: skip
            for line in campaign.summary(results[-1]):
                print(line)
            if results[-1].report:
                print(results[-1].report)
    except KeyboardInterrupt:
        print("\nchaos: interrupted", file=sys.stderr)
        return 130
    finally:
        if env is not None:
            env.stop()
        stop_everything()
    if mutant is not None:
        good = mutant_verdict(mutant, results[-1] if results else None)
    else:
        good = all(r.ok if r.arm == "dispatch" else r.violations > 0 for r in results)
    print("chaos: " + ("passed" if good else "FAILED") + f" (run folder {run_dir})")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
