"""Every upstream group, version and resource dispatch reads or writes, once: Trainer, Kueue, JobSet, batch and
the core groups. ``Resource.path`` builds a REST path; the rest of the project names a resource by these
constants, never by its strings.

The versions are the ones the pinned upstream releases serve (docs/install.md): Trainer v1alpha1, Kueue
v1beta2, JobSet v1alpha2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
BATCH_GROUP: Final = "batch"
COORDINATION_GROUP: Final = "coordination.k8s.io"


@dataclass(frozen=True)
class Resource:
    """One resource of one group and version; ``group`` "" is the core group."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """As an object's ``apiVersion`` writes it."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def everywhere(self) -> str:
        """The REST path of the collection in all namespaces (``path`` wants one for a namespaced resource)."""
        base = "/api/" + self.version if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{base}/{self.plural}"

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path of the collection, of one object (``name``) or of its ``subresource``."""
        base = "/api/" + self.version if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced:
            if namespace is None:
                raise ValueError(f"{self.plural} is namespaced")
            base += f"/namespaces/{quote(namespace, safe='')}"
        path = f"{base}/{self.plural}"
        if name is not None:
            path += "/" + quote(name, safe="")
        if subresource is not None:
            path += "/" + subresource
        return path


TRAINJOBS: Final = Resource(TRAINER_GROUP, TRAINER_VERSION, "trainjobs")
TRAINING_RUNTIMES: Final = Resource(TRAINER_GROUP, TRAINER_VERSION, "trainingruntimes")
CLUSTER_TRAINING_RUNTIMES: Final = Resource(TRAINER_GROUP, TRAINER_VERSION, "clustertrainingruntimes", namespaced=False)
WORKLOADS: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "workloads")
ADMISSION_CHECKS: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", namespaced=False)
LOCAL_QUEUES: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "localqueues")
CLUSTER_QUEUES: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", namespaced=False)
MULTIKUEUE_CONFIGS: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "multikueueconfigs", namespaced=False)
MULTIKUEUE_CLUSTERS: Final = Resource(KUEUE_GROUP, KUEUE_VERSION, "multikueueclusters", namespaced=False)
JOBSETS: Final = Resource(JOBSET_GROUP, JOBSET_VERSION, "jobsets")
JOBS: Final = Resource(BATCH_GROUP, "v1", "jobs")
PODS: Final = Resource("", "v1", "pods")
NODES: Final = Resource("", "v1", "nodes", namespaced=False)
CONFIG_MAPS: Final = Resource("", "v1", "configmaps")
NAMESPACES: Final = Resource("", "v1", "namespaces", namespaced=False)
SERVICE_ACCOUNTS: Final = Resource("", "v1", "serviceaccounts")
EVENTS: Final = Resource("", "v1", "events")
LEASES: Final = Resource(COORDINATION_GROUP, "v1", "leases")
TOKEN_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEWS: Final = Resource("authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False)
SELF_SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", namespaced=False
)
TRAINER_API_VERSION: Final = TRAINJOBS.api_version
KUEUE_API_VERSION: Final = WORKLOADS.api_version
