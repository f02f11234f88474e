"""The admission policies the API server enforces itself, with or without the webhook, assembled in the chart's
order. Each policy lives beside its Python twin in its concern's module (``webhook.rules``); this module only
lists them (docs/webhook.md, "In-process: the admission policies").

The principals and dispatch's AdmissionCheck names are rendered into the policies from the webhook's config.
"""

from __future__ import annotations

from typing import Any

from contract.multicluster import ROLE_MANAGER, ROLE_WORKER
from webhook.cel import binding, field_policy
from webhook.config import Config
from webhook.rules.identity import identity_policy
from webhook.rules.jobs import job_resume_policy
from webhook.rules.jobsets import jobset_policy
from webhook.rules.multicluster import manager_policies, mark_copy_policy, worker_policies
from webhook.rules.owners import carried_field_rules, principal_policies
from webhook.rules.record_start import record_start_policy
from webhook.rules.reserved_keys import reserved_keys_policy
from webhook.rules.runtime_copy import runtime_copies_policy
from webhook.rules.unsuspend import unsuspend_policy
from webhook.rules.workloads import workloads_policy


def field_policies(config: Config) -> list[dict[str, Any]]:
    """The field rules that police what each owner writes, each a policy of its own, in the chart's order."""
    return [
        reserved_keys_policy(config),
        identity_policy(config),
        unsuspend_policy(config),
        workloads_policy(config),
        jobset_policy(),
        job_resume_policy(),
        runtime_copies_policy(),
    ]


def admission_policies(config: Config, *, namespace: str, owners_too: bool = True) -> list[dict[str, Any]]:
    """The policies and their bindings, for dispatch installed in ``namespace``: the owner policies (default
    deny by principal) and the field rules that police what each owner writes, some carried by an owner policy
    (``carried_field_rules``); ``owners_too=False``, the field rules alone, each in a policy of its own (their
    tests, where one ServiceAccount plays an owner)."""
    docs = []
    # Without the owner policies, the field rules they carry are policies of their own.
    alone = [] if owners_too else [field_policy(rules) for rules in carried_field_rules(config).values()]
    for policy in [*(principal_policies(config) if owners_too else []), *field_policies(config), *alone]:
        docs += [policy, binding(policy["metadata"]["name"], namespace)]
    if config.multicluster_role == ROLE_MANAGER:
        docs += manager_policies(namespace)
    docs += worker_policies(config, namespace)
    marks = mark_copy_policy(namespace) if config.multicluster_role == ROLE_WORKER else []
    return docs + record_start_policy(namespace, config.multicluster_role) + marks
