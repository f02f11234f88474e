"""The agent's configuration file, validated at start-up with errors that name the bad key."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.api.settings import ApiSettings
from agent.constants import (
    CONTACT_SECONDS,
    DEFAULT_HEALTH_PORT,
    DEFAULT_WORKERS,
    LEASE_DURATION_SECONDS,
    RENEW_DEADLINE_SECONDS,
    RENEW_PERIOD_SECONDS,
    RETRY_PERIOD_SECONDS,
    WORKER_ROUND_SECONDS,
)
from contract.claims import DEFAULT_ORIGIN
from contract.keys import LEASE_NAME, LEASE_NAMESPACE
from contract.multicluster import ROLE_SINGLE, Role
from contract.scope import out_of_scope
from serving.config import ConfigError, load_yaml_model

__all__ = ["OVERRIDDEN_API_KEYS", "AgentConfig", "ConfigError", "load_config", "served_api_settings"]

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes qualified name (a taint key is one), or None: ``[prefix/]name`` with
    a DNS subdomain prefix of at most 253 characters and a name of at most 63 (apimachinery's
    IsQualifiedName)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "the prefix before '/' is empty"
    if prefix:
        if "/" in prefix:
            return "has more than one '/'"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return f"prefix {prefix!r} is not a DNS subdomain (lower case, at most 253 characters)"
    if not name:
        return "the name part is empty"
    if len(name) > 63 or not _QUALIFIED_NAME_PART.fullmatch(name):
        return (
            f"name {name!r} must be at most 63 characters of letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit"
        )
    return None


OVERRIDDEN_API_KEYS: Final = ("lease_namespace", "lease_name", "node_loss_taints", "worker_contact_seconds")
"""The ``api:`` settings that the top-level keys of the same name replace in ``dispatch-agent serve``: the API
checks the heartbeat of the Lease the controller itself renews, classifies node loss as the controller
does, and proves the contact Lease's duration the controller renews with, so one process never holds two answers."""


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    lease_namespace: str = Field(LEASE_NAMESPACE, alias="leaseNamespace")
    """Where the leader-election Lease lives; the adapter reads its heartbeat to know the gate is served."""
    lease_name: str = Field(LEASE_NAME, alias="leaseName")
    lease_duration_seconds: int = Field(LEASE_DURATION_SECONDS, alias="leaseDurationSeconds", ge=2, le=3600)
    """How long the Lease is honoured after its last renewal, as another replica observes it."""
    renew_deadline_seconds: float = Field(RENEW_DEADLINE_SECONDS, alias="renewDeadlineSeconds", gt=0, le=3600)
    """A leader that has not renewed for this long steps down (before the others may take over)."""
    renew_period_seconds: float = Field(RENEW_PERIOD_SECONDS, alias="renewPeriodSeconds", gt=0, le=3600)
    retry_period_seconds: float = Field(RETRY_PERIOD_SECONDS, alias="retryPeriodSeconds", gt=0, le=3600)
    node_loss_taints: tuple[str, ...] = Field((), alias="nodeLossTaints")
    """The site's taint keys that also mean "this node is lost", added to unreachable/not-ready/out-of-service."""
    workers: int = Field(DEFAULT_WORKERS, ge=1, le=64)
    """Workloads reconciled at once (one Workload is never reconciled by two at a time)."""
    api: ApiSettings = Field(default_factory=ApiSettings)
    """The supervisor API, served over HTTPS when the TLS files are given (docs/api.md). Its ``scope`` and
    ``ownNamespace`` are the gate's too (``scope_problem``)."""
    health_port: int = Field(DEFAULT_HEALTH_PORT, alias="healthPort", ge=1, le=65535)
    """Plain HTTP: /healthz, /readyz and /metrics."""
    multicluster_role: Role = Field(ROLE_SINGLE, alias="multiclusterRole")
    """This cluster's part under MultiKueue (contract.multicluster.Role; docs/multicluster.md)."""
    worker_kubeconfigs: dict[str, str] = Field(default_factory=dict, alias="workerKubeconfigs")
    """On a MultiKueue manager: a kubeconfig file per worker, keyed by its MultiKueueCluster's name, with the
    agent's own read-only credential there (pods and nodes). The gate reads every worker of a dispatch job's
    MultiKueueConfig before a dispatch, and holds on one it has no credential for (docs/multicluster.md,
    guarantee 4)."""
    worker_round_seconds: float = Field(WORKER_ROUND_SECONDS, alias="workerRoundSeconds", gt=0, le=86400)
    """On a MultiKueue manager: how often the agent deletes, on every worker, the replicas of runtime copies whose
    TrainJob is gone (docs/multicluster.md, "The runtime copy on the workers")."""

    worker_contact_seconds: int = Field(CONTACT_SECONDS, alias="workerContactSeconds", ge=8, le=3600)
    """On a MultiKueue manager: the duration of the contact Lease the agent renews on every worker, every quarter
    of it. A worker that sees no renewal for this long deletes the copies it let start (docs/multicluster.md,
    "Contact with the manager")."""
    multikueue_origin: str = Field(DEFAULT_ORIGIN, alias="multikueueOrigin", min_length=1, max_length=63)
    """On a MultiKueue manager: Kueue's ``multiKueue.origin`` there (its default ``multikueue``). The claims this
    agent writes on a worker carry it, so a worker shared by two managers (each with its own origin, as Kueue
    requires) keeps each manager's claims apart (docs/multicluster.md, "Two managers")."""
    worker_lease_namespace: str | None = Field(None, alias="workerLeaseNamespace")
    """On a MultiKueue manager: the namespace of the contact Lease on the workers, their agents' ``leaseNamespace``
    (default: the same as here)."""

    @property
    def scope_reads_labels(self) -> bool:
        """Whether ``scope_problem`` needs the namespace's labels: only a selector reads them."""
        selector = self.api.scope.namespace_selector
        return bool(selector.match_labels or selector.match_expressions)

    def scope_problem(self, namespace: str, labels: Mapping[str, str] | None) -> str | None:
        """Why dispatch's webhook and policies do not police ``namespace`` (contract/scope.py), or None."""
        scope = self.api.scope
        return out_of_scope(
            namespace,
            labels,
            own_namespace=self.api.own_namespace,
            exempt_namespaces=scope.exempt_namespaces,
            selector=scope.namespace_selector.as_kubernetes(),
        )

    @model_validator(mode="after")
    def _election(self) -> AgentConfig:
        # client-go's own checks: a leader must step down before its Lease can be taken, and must get
        # more than one try at renewing before it does.
        if not self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError(
                f"renewDeadlineSeconds ({self.renew_deadline_seconds:g}) must be less than leaseDurationSeconds "
                f"({self.lease_duration_seconds}): a leader steps down before another replica may take the Lease"
            )
        for name, value in (("retryPeriodSeconds", self.retry_period_seconds),
                            ("renewPeriodSeconds", self.renew_period_seconds)):  # fmt: skip
            if not value < self.renew_deadline_seconds:
                raise ValueError(
                    f"{name} ({value:g}) must be less than renewDeadlineSeconds ({self.renew_deadline_seconds:g}): "
                    "a leader gets another try at renewing before it steps down"
                )
        return self

    @model_validator(mode="after")
    def _one_answer(self) -> AgentConfig:
        # The top level is what `dispatch-agent serve` uses for both: an api: value that differs would be
        # silently ignored, and the operator would believe the API checks another Lease than it does.
        for key in OVERRIDDEN_API_KEYS:
            if key in self.api.model_fields_set and getattr(self.api, key) != getattr(self, key):
                name = AgentConfig.model_fields[key].alias
                raise ValueError(
                    f"api.{name} ({getattr(self.api, key)!r}) differs from the top-level {name} "
                    f"({getattr(self, key)!r}): the API and the readmission controller use one value, the "
                    f"top-level one; set {name} there and remove it from api:"
                )
        return self

    @field_validator("lease_namespace", "worker_lease_namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
            raise ValueError(f"{value!r} is not a namespace name (a DNS label: lower case, at most 63 characters)")
        return value

    @field_validator("lease_name")
    @classmethod
    def _lease_name(cls, value: str) -> str:
        if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
            raise ValueError(f"{value!r} is not an object name (a DNS subdomain: lower case, at most 253 characters)")
        return value

    @field_validator("worker_kubeconfigs")
    @classmethod
    def _workers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, path in value.items():
            if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
                raise ValueError(f"{name!r} is not a MultiKueueCluster name (a DNS subdomain: lower case)")
            if not path:
                raise ValueError(f"{name}: the kubeconfig path is empty")
        return value

    @field_validator("node_loss_taints")
    @classmethod
    def _taints(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, key in enumerate(value):
            problem = qualified_name_problem(key)
            if problem is not None:
                raise ValueError(f"[{i}] {key!r} is not a taint key: {problem}")
        if len(set(value)) != len(value):
            raise ValueError("lists a taint key twice")
        return value


def served_api_settings(config: AgentConfig, api_port: int | None = None) -> ApiSettings:
    """The API's settings as ``dispatch-agent serve`` runs them: ``config.api`` with the top-level
    ``leaseNamespace``, ``leaseName``, ``nodeLossTaints`` and ``workerContactSeconds`` in place of its own, and
    ``--api-port`` (when given) in place of ``api.port``. The top level wins even where only ``api:`` sets a key."""
    update: dict[str, object] = {key: getattr(config, key) for key in OVERRIDDEN_API_KEYS}
    if api_port is not None:
        update["port"] = api_port
    return config.api.model_copy(update=update)


def load_config(path: str | Path | None) -> AgentConfig:
    """The config from a YAML file (or the defaults); ConfigError names the bad key and why."""
    return load_yaml_model(path, AgentConfig)
