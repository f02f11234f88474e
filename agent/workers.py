"""Guarantee 4 on a MultiKueue manager, decided: which workers the readmission gate must look at before a
dispatch, and what it waits for there (docs/multicluster.md, "Waiting for the previous execution across
clusters"). Pure functions of the objects as read; agent/workerreads.py reads them.

The manager runs no pod of a dispatch job, so its own pods prove nothing: an earlier execution may still run on
any worker the job's MultiKueueConfig lists, the one MultiKueue chose last or one it chose before. So the gate
looks at every one of them, fail-closed:

- a worker is read with the agent's own read-only credential for it (never Kueue's); one it has no credential
  for, or that cannot be read, holds the dispatch, named;
- a worker an administrator fenced (``ANNOTATION_FENCED`` on its MultiKueueCluster: it is shut down) is not
  read: nothing of it still runs, as a node with the ``out-of-service`` taint;
- a MultiKueue check whose MultiKueueConfig cannot be read holds too: the workers cannot be known.

On a worker that is read, the pods labelled with the job's JobSet name in the job's namespace are sorted by the
ownership chain as on one cluster (``worker_blockers``), and those that count are judged by the node-loss
classification on that worker's nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent import podowners
from agent.gate import Blocker
from agent.nodeloss import assess
from contract.multicluster import config_clusters, is_fenced, multikueue_config_of
from contract.objects import dig


@dataclass(frozen=True)
class WorkerPlan:
    read: tuple[str, ...]
    """The workers to read, with the agent's credential for each."""
    fenced: tuple[str, ...]
    """The workers an administrator fenced: not read, nothing of them waited on."""
    blockers: tuple[Blocker, ...]
    """What holds before any worker is read: a MultiKueueConfig that cannot be read, a worker with no
    credential."""


def plan_workers(
    checks: Mapping[str, Mapping[str, Any] | None],
    configs: Mapping[str, Mapping[str, Any] | None],
    clusters: Sequence[Mapping[str, Any]],
    credentials: Collection[str],
) -> WorkerPlan:
    """Which workers to read for a Workload in MultiKueue mode. ``checks``: the MultiKueue checks it lists, each
    as read (None: gone); ``configs``: the MultiKueueConfigs they name, as read (None: gone); ``clusters``: every
    MultiKueueCluster (their fences); ``credentials``: the workers the agent has a credential for."""
    blockers: list[Blocker] = []
    workers: set[str] = set()
    for name, check in sorted(checks.items()):
        config_name = multikueue_config_of(check)
        config = configs.get(config_name) if config_name is not None else None
        if config is None:
            what = f"MultiKueueConfig {config_name}, which cannot be read" if config_name else "no MultiKueueConfig"
            blockers.append(Blocker("", f"the MultiKueue check {name} names {what}: its workers are unknown", ""))
            continue
        workers.update(config_clusters(config))
    fenced = {dig(c, "metadata", "name") for c in clusters if is_fenced(c)}
    read = []
    for worker in sorted(workers - fenced):
        if worker in credentials:
            read.append(worker)
        else:
            blockers.append(Blocker("", "the agent has no credential to read it (workerKubeconfigs)", worker))
    return WorkerPlan(tuple(read), tuple(sorted(workers & fenced)), tuple(blockers))


def unreadable(worker: str, why: str) -> Blocker:
    """A worker the agent could not read: it holds, as a pod that may still run there would."""
    return Blocker("", f"cannot be read: {why}", worker)


@dataclass(frozen=True)
class WorkerLook:
    """What one worker showed: the pods labelled with the job's JobSet name in its namespace, the Jobs they name
    and the Nodes they are bound to, by name (one absent: not found, gone)."""

    pods: Sequence[Mapping[str, Any]]
    jobs: Mapping[str, Mapping[str, Any]]
    nodes: Mapping[str, Mapping[str, Any]]


def worker_blockers(worker: str, jobset_name: str, look: WorkerLook, taints: Sequence[str]) -> list[Blocker]:
    """The pods on ``worker`` that may still run, each named with the worker. Sorted by the ownership chain as
    on one cluster (agent/podowners.py), with no JobSet UID known: every JobSet of the job's name there is one of
    its copies' (MultiKueue reuses the name), so a pod of any of them counts, and so does a pod whose Job is
    gone; a pod the chain proves someone else's does not. Judged on that worker's nodes (agent/nodeloss.py)."""
    owned = podowners.sort_pods({"metadata": {"name": jobset_name}}, None, look.pods, look.jobs)
    return [
        Blocker(pod, f"{c.verdict.value}: {c.reason}", worker)
        for pod, c in assess(owned.ours, look.nodes, taints).may_still_run
    ]


def is_remote(blocker: Blocker) -> bool:
    """The blocker is on a worker (or is the workers' being unknown): no watch of this cluster shows its change,
    so the gate looks again after a backoff."""
    return blocker.worker is not None
