"""The API's settings: the site's keys, timeouts, the readmission controller's Lease, who may call.

Meant to be one section (``api:``) of the agent's configuration file; every field has a default, so an
empty section is a working plain-mode setup.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.api.principals import OwnerPrincipals
from agent.constants import CONTACT_SECONDS
from contract.errors import ContractError
from contract.identity import R_BOUND
from contract.keys import LEASE_NAME, LEASE_NAMESPACE
from contract.multicluster import DEFAULT_MIN_DISPATCHES
from contract.site import check_site_keys

DEFAULT_PORT: Final = 8443
DEFAULT_WORKLOAD_TIMEOUT: Final = 30.0
DEFAULT_PROBE_SECONDS: Final = 10.0
"""The spec's ten seconds of watching the Preflight probe."""
DEFAULT_TOKEN_CACHE_SECONDS: Final = 10.0
DEFAULT_FAILED_TOKEN_LIMIT: Final = 10
DEFAULT_FAILED_TOKEN_WINDOW: Final = 60.0
DEFAULT_MAX_FOLLOW_STREAMS: Final = 4
DEFAULT_MAX_WATCHES: Final = 8


class KueueConfigRef(BaseModel):
    """Where Kueue's Configuration is kept in an install: a key of a ConfigMap (Kueue's chart and manifests name
    these by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field("kueue-system", min_length=1)
    name: str = Field("kueue-manager-config", min_length=1)
    key: str = Field("controller_manager_config.yaml", min_length=1)


class SelectorRequirement(BaseModel):
    """One ``matchExpressions`` requirement of a LabelSelector, as the API server validates it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(BaseModel):
    """A Kubernetes LabelSelector; empty selects everything."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[SelectorRequirement, ...] = Field((), alias="matchExpressions")

    def as_kubernetes(self) -> dict[str, Any]:
        """The selector as the API server takes it (contract/scope.py reads this form)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)


class NamespaceScope(BaseModel):
    """The namespaces dispatch polices (the chart's ``scope``, which the webhook configurations and the policy
    bindings carry too; contract/scope.py): all but kube-system, ``ownNamespace`` and ``exemptNamespaces``, of those
    ``namespaceSelector`` selects."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    exempt_namespaces: tuple[str, ...] = Field((), alias="exemptNamespaces")
    namespace_selector: LabelSelector = Field(default_factory=LabelSelector, alias="namespaceSelector")


class ApiSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    """HTTPS port of the API (the agent's ``serve`` binds it; the API itself does not)."""
    site_labels: dict[str, str] = Field(default_factory=dict, alias="labels")
    """The site's labels, on every TrainJob Start creates."""
    site_annotations: dict[str, str] = Field(default_factory=dict, alias="annotations")
    """The site's annotations, on every TrainJob Start creates."""
    allow_rank_restart: bool = Field(False, alias="allowRankRestart")
    """Accept runtimes that let a failed rank be replaced (as the webhook's option of the same name)."""
    workload_timeout: float = Field(DEFAULT_WORKLOAD_TIMEOUT, alias="workloadTimeout", gt=0, le=600)
    """Seconds Start waits in Kueue mode for the Workload with the gate and dispatch's check (timeouts.workload)."""
    probe_seconds: float = Field(DEFAULT_PROBE_SECONDS, alias="probeSeconds", gt=0, le=600)
    """Seconds Preflight watches its probe."""
    node_loss_taints: tuple[str, ...] = Field((), alias="nodeLossTaints")
    """The site's taint keys that also mean node loss (the agent's own setting of the same name)."""
    own_namespace: str = Field(LEASE_NAMESPACE, alias="ownNamespace", min_length=1)
    """dispatch's own namespace (the chart's release namespace). It and kube-system are excluded from the
    webhook and the policies, so Start and Preflight refuse them."""
    scope: NamespaceScope = Field(default_factory=NamespaceScope)
    """The namespaces the webhook and the policies police (the chart's ``scope``): Preflight, Start, Open and Release
    refuse any other, where a job would run unpoliced."""
    lease_namespace: str = Field(LEASE_NAMESPACE, alias="leaseNamespace")
    lease_name: str = Field(LEASE_NAME, alias="leaseName")
    """The readmission controller's Lease, whose heartbeat Preflight checks in Kueue mode."""
    token_audiences: tuple[str, ...] = Field((), alias="tokenAudiences")
    """Audiences a caller's token must be bound to (TokenReview ``spec.audiences``). Empty: the API server's
    own, so any token the API server accepts. A dedicated audience keeps the agent from ever holding a token
    that the API server itself would honour."""
    token_cache_seconds: float = Field(DEFAULT_TOKEN_CACHE_SECONDS, alias="tokenCacheSeconds", ge=0, le=300)
    """Seconds a TokenReview answer is reused (0: never)."""
    failed_token_limit: int = Field(DEFAULT_FAILED_TOKEN_LIMIT, alias="failedTokenLimit", ge=1, le=100_000)
    """Failed bearer tokens (401) one client address may present within ``failedTokenWindow`` before its
    calls are refused with 429 without a TokenReview (a token accepted within the cache's lifetime still
    passes): guessing tokens, or flooding the API server with TokenReviews through the agent, is bounded."""
    failed_token_window: float = Field(DEFAULT_FAILED_TOKEN_WINDOW, alias="failedTokenWindow", gt=0, le=3600)
    max_follow_streams: int = Field(DEFAULT_MAX_FOLLOW_STREAMS, alias="maxFollowStreams", ge=1, le=10_000)
    """Output calls with ``follow`` one user may hold open at once (each holds a log stream from the
    kubelet through the API server); the next one is refused with 429 until one ends."""
    max_watches: int = Field(DEFAULT_MAX_WATCHES, alias="maxWatches", ge=1, le=10_000)
    """Watch calls one user may have waiting at once (each holds a connection, and an answer costs a scan of the
    namespace's jobs in memory); the next one is refused with 429 until one returns."""
    require_preflight: bool = Field(False, alias="requirePreflight")
    """Start observe-only, until a Preflight passes (otherwise only a failed Preflight makes it so)."""
    request_timeout: float = Field(30.0, alias="requestTimeout", gt=0, le=300)
    """Seconds one request to the API server may take (a log stream is not limited by it)."""
    min_dispatches: int = Field(DEFAULT_MIN_DISPATCHES, alias="minDispatches", ge=1, le=R_BOUND)
    """MultiKueue: Start refuses a job whose runtime affords fewer dispatches than this (each dispatch spends
    K = maxRestarts + 1 of R's million; contract/multicluster.py)."""
    worker_contact_seconds: int = Field(CONTACT_SECONDS, alias="workerContactSeconds", ge=8, le=3600)
    """MultiKueue manager: the contact Lease's duration (the agent's own setting of the same name), which Preflight
    proves below Kueue's ``workerLostTimeout``."""
    kueue_config: KueueConfigRef = Field(default_factory=KueueConfigRef, alias="kueueConfig")
    """MultiKueue manager: Kueue's Configuration, which Preflight reads ``multiKueue.workerLostTimeout`` from."""
    owners: OwnerPrincipals | None = None
    """The components' principals the owner policies name (the chart's webhook.kueue, webhook.controllers and
    webhook.owners): Preflight proves each is there and the component's (agent/api/principals.py). None (an agent
    run without the chart): not proven, and Preflight's trainer reason says so."""

    @field_validator("site_labels", "site_annotations")
    @classmethod
    def _site_keys(cls, value: dict[str, str], info: object) -> dict[str, str]:
        kind = "labels" if getattr(info, "field_name", "") == "site_labels" else "annotations"
        try:
            check_site_keys(kind, value)
        except ContractError as exc:
            raise ValueError(str(exc)) from None
        return value
