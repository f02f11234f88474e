"""The webhook's configuration file, validated at start-up with errors that name the bad key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.keys import ADMISSION_CHECK_NAME, LABEL_REPLICA_OF
from contract.multicluster import ROLE_SINGLE, ROLE_WORKER, Role, is_copy
from contract.objects import labels
from serving.config import ConfigError, load_yaml_model
from webhook.owners import (
    BREAK_GLASS,
    DEFAULT_GROUPS,
    DEFAULT_USERNAMES,
    DISPATCH,
    DISPATCH_STATUS,
    GARBAGE_COLLECTOR,
    JOB_CONTROLLER,
    JOBSET,
    KUBELET,
    KUBERNETES_PRINCIPALS,
    KUEUE,
    MANAGER_AGENT,
    MULTIKUEUE,
    MULTIKUEUE_STATUS,
    NODE_LIFECYCLE,
    POD_GARBAGE_COLLECTOR,
    SCHEDULER,
    TRAINER,
)
from webhook.review import User

__all__ = [
    "DEFAULT_CONTROLLER_USERNAMES",
    "DEFAULT_DISPATCH_USERNAME",
    "DEFAULT_KUEUE_USERNAME",
    "Config",
    "ConfigError",
    "Owners",
    "Principals",
    "load_config",
]

DEFAULT_DISPATCH_USERNAME: Final = "system:serviceaccount:dispatch-system:dispatch-k8s"
"""The agent's ServiceAccount as the chart installs it."""
DEFAULT_KUEUE_USERNAME: Final = "system:serviceaccount:kueue-system:kueue-controller-manager"
DEFAULT_CONTROLLER_USERNAMES: Final = (
    DEFAULT_USERNAMES[GARBAGE_COLLECTOR][0],
    *DEFAULT_USERNAMES[TRAINER],
    *DEFAULT_USERNAMES[JOBSET],
)
"""The garbage collector (as kubeadm runs it, under its own ServiceAccount), Trainer and JobSet, one principal each
as the owners' defaults name them (webhook/owners.py): they delete a dispatch job's JobSet legitimately."""


class Principals(BaseModel):
    """Who someone is: any of these usernames, or a member of any of these groups."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usernames: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def includes(self, user: User) -> bool:
        return user.username in self.usernames or any(g in self.groups for g in user.groups)


KUBELET_IS_NO_SETTING: Final = (
    "owners.kubelet (the chart's webhook.owners.kubelet) is no longer a setting: remove it. A kubelet is known as "
    "Kubernetes names it, the user system:node:<node>, and may write the status of that node's pods only "
    "(docs/security.md)"
)


def _owner(role: str) -> Principals:
    return Principals(usernames=DEFAULT_USERNAMES[role], groups=DEFAULT_GROUPS[role])


class Owners(BaseModel):
    """The principals of the other parties that own part of a dispatch job's objects (webhook/owners.py; dispatch
    and Kueue are the config's own). Defaults name one principal per component, as one upstream install runs it;
    set them to how your cluster runs them (the agent's Preflight proves them). ``breakGlass`` may write anything
    on dispatch's objects: empty unless a site names its admins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trainer: Principals = Field(default_factory=lambda: _owner(TRAINER))
    jobset: Principals = Field(default_factory=lambda: _owner(JOBSET))
    jobController: Principals = Field(default_factory=lambda: _owner(JOB_CONTROLLER))
    garbageCollector: Principals = Field(default_factory=lambda: _owner(GARBAGE_COLLECTOR))
    podGarbageCollector: Principals = Field(default_factory=lambda: _owner(POD_GARBAGE_COLLECTOR))
    nodeLifecycle: Principals = Field(default_factory=lambda: _owner(NODE_LIFECYCLE))
    scheduler: Principals = Field(default_factory=lambda: _owner(SCHEDULER))
    breakGlass: Principals = Field(default_factory=lambda: _owner(BREAK_GLASS))

    @model_validator(mode="before")
    @classmethod
    def _no_kubelet(cls, data: Any) -> Any:
        # A setting once (the group system:nodes): say what replaced it, not only that the key is unknown.
        if isinstance(data, Mapping) and KUBELET in data:
            raise ValueError(KUBELET_IS_NO_SETTING)
        return data


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    dispatch: Principals = Field(default_factory=lambda: Principals(usernames=(DEFAULT_DISPATCH_USERNAME,)))
    """dispatch's principals; everyone else is a stranger."""
    kueue: Principals = Field(default_factory=lambda: Principals(usernames=(DEFAULT_KUEUE_USERNAME,)))
    """Kueue's controller, which copies dispatch's gate from a TrainJob to its Workload."""
    controllers: Principals = Field(default_factory=lambda: Principals(usernames=DEFAULT_CONTROLLER_USERNAMES))
    """The garbage collector, Trainer and JobSet: may delete a dispatch job's JobSet."""
    admission_checks: tuple[str, ...] = Field((ADMISSION_CHECK_NAME,), alias="admissionChecks")
    """The AdmissionCheck objects served by dispatch's controller: only dispatch sets them Ready."""
    allow_spec_prologue: bool = Field(False, alias="allowSpecPrologue")
    """Accept the spec's original prologue text too (with a warning: it can repeat or garble an epoch)."""
    allow_rank_restart: bool = Field(False, alias="allowRankRestart")
    """Accept runtimes that let a failed rank be replaced without a new execution identity."""
    owners: Owners = Field(default_factory=Owners)
    """Who else owns part of a dispatch job's objects: the default-deny policies (webhook/owners.py)."""
    multicluster_role: Role = Field(ROLE_SINGLE, alias="multiclusterRole")
    """This cluster's part under MultiKueue (contract.multicluster.Role; docs/multicluster.md)."""
    multikueue: Principals = Field(default_factory=Principals)
    """Role worker only: the manager's MultiKueue on this worker (the user of its MultiKueueCluster's kubeconfig),
    which creates and deletes the copies of dispatch's TrainJobs and Workloads (webhook/owners.py MULTIKUEUE)."""

    manager_agent: Principals = Field(default_factory=Principals, alias="managerAgent")
    """Role worker only: the manager's dispatch agent on this worker (the user of its credential here), which
    creates and deletes the replicas of dispatch's runtime copies and creates the prologue's ConfigMap
    (webhook/owners.py MANAGER_AGENT)."""

    @model_validator(mode="after")
    def _multikueue_on_a_worker(self) -> Config:
        # Elsewhere they would be ignored, and their operator would believe MultiKueue, or the manager's agent,
        # may write here.
        for key, principals, whose in (
            ("multikueue", self.multikueue, "MultiKueue's principal"),
            ("managerAgent", self.manager_agent, "the manager agent's principal"),
        ):
            if principals != Principals() and self.multicluster_role != ROLE_WORKER:
                raise ValueError(
                    f"{key} is set, but multiclusterRole is {self.multicluster_role!r}: {whose} is used on a worker "
                    f"only ({ROLE_WORKER!r})"
                )
        return self

    def principals(self, role: str) -> Principals:
        """The principals of a role of webhook/owners.py (MultiKueue's: nobody but in role worker)."""
        if role in (DISPATCH, DISPATCH_STATUS):
            return self.dispatch
        if role in (KUEUE, MULTIKUEUE_STATUS):
            return self.kueue
        if role == MULTIKUEUE:
            return self.multikueue if self.multicluster_role == ROLE_WORKER else Principals()
        if role == MANAGER_AGENT:
            return self.manager_agent if self.multicluster_role == ROLE_WORKER else Principals()
        if role in KUBERNETES_PRINCIPALS:
            return Principals()  # none by setting: the policies name Kubernetes' own
        return getattr(self.owners, role)

    def multikueue_copy(self, user: User, obj: Mapping[str, Any] | None) -> bool:
        """A write by the manager's MultiKueue, on a worker, of one of its copies (its origin label on it)."""
        return self.principals(MULTIKUEUE).includes(user) and is_copy(obj)

    def replica_created(self, user: User, obj: Mapping[str, Any] | None) -> bool:
        """A create by the manager's dispatch agent, on a worker, of a replica of a runtime copy (its
        ``LABEL_REPLICA_OF`` on it): the manager's webhook and policies judged the copy it replicates."""
        return self.principals(MANAGER_AGENT).includes(user) and bool(labels(obj).get(LABEL_REPLICA_OF))


def load_config(path: str | Path | None) -> Config:
    """The config from a YAML file (or the defaults); ConfigError names the bad key and why."""
    return load_yaml_model(path, Config)
