"""List's pure decisions: the name prefix of a JobID's TrainJobs, and dispatch's TrainJobs among those listed
with their phase and orphan reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.api.errors import contract
from agent.api.models import ListItem
from agent.domain.changes import UNKNOWN
from agent.domain.kueue_objects import controlled_workloads
from agent.domain.status import phase
from contract.errors import ContractError
from contract.names import parse_name, validate_job_id
from contract.objects import dig
from contract.ownership import is_dispatch, is_kueue_mode


def name_prefix(job_id: str | None) -> str | None:
    """The name prefix of a JobID's TrainJobs (``dj-<lowercase JobID>-s``): the name, not a label, says whose
    a TrainJob is, so a stripped label hides nothing."""
    if job_id is None:
        return None
    contract(validate_job_id, job_id)
    return f"dj-{job_id.lower()}-s"


def list_item(trainjob: Mapping[str, Any], state: str) -> ListItem:
    """A dispatch TrainJob as List and Watch report it, with its phase ``state``."""
    name, ns, uid = (
        dig(trainjob, "metadata", "name"),
        dig(trainjob, "metadata", "namespace"),
        dig(trainjob, "metadata", "uid"),
    )
    try:
        parsed = parse_name(name)
        job_id, n = parsed.job_id, parsed.n
    except ContractError:
        job_id, n = None, None
    return ListItem(
        namespace=str(ns),
        name=str(name),
        uid=str(uid),
        job_id=job_id,
        n=n,
        phase=state,
        orphan=f"{ns}/{name}",
        deletion_timestamp=dig(trainjob, "metadata", "deletionTimestamp"),
    )


def list_items(
    trainjobs: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    checks: Sequence[str],
    prefix: str | None,
) -> list[ListItem]:
    """dispatch's TrainJobs among those listed (the spec's test: the name, or dispatch's runtime patch; never
    labels), with their phase as Status computes it and their orphan reference ``<namespace>/<name>``."""
    found = []
    workloads = list(workloads)
    for tj in trainjobs:
        name, uid = dig(tj, "metadata", "name"), dig(tj, "metadata", "uid")
        if not is_dispatch(tj) or not isinstance(name, str) or (prefix and not name.startswith(prefix)):
            continue
        claiming = controlled_workloads(workloads, str(uid)) if is_kueue_mode(tj) else []
        # Several Workloads claiming it: Status answers conflict, naming them.
        state = UNKNOWN if len(claiming) > 1 else phase(tj, claiming[0] if claiming else None, checks)
        found.append(list_item(tj, state))
    return found
