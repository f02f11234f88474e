"""Tier B: a TrainJob deleted and Started again under its name.

The identity counts the executions of one TrainJob (A in its runtime patch, J in its JobSet), so a new
TrainJob of the same name would start again at A = 0 with a new JobSet and repeat the earlier one's first
identity — here while the earlier one's pod still runs. Start refuses while anything of the earlier
TrainJob is left, naming it in ``orphans``; once nothing is left the agent cannot tell, and not Starting a
name again after Open is the supervisor's part (docs/contract.md).
"""

from __future__ import annotations

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from contract.keys import ANNOTATION_ADMISSION
from tests.agent.api import test_e2e as base
from tests.agent.api.test_e2e import E2E, TRAINER, eventually, ref
from tests.agent.api.test_operations_e2e import let_go, linger, plain_request, running_pod

controller = base.controller
e2e = base.e2e

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]
JOBSET = "jobset.x-k8s.io/v1alpha2"


async def test_a_name_an_earlier_trainjob_left_a_running_pod_under_is_refused(e2e: E2E):
    req = plain_request(e2e)
    async with e2e.client() as api:
        first = await api.start(req)
        assert (await api.open(ref(first))).a == 1
        pod = await running_pod(e2e, first.name)
        pod_name = pod["metadata"]["name"]
        assert pod["metadata"]["annotations"][ANNOTATION_ADMISSION] == "1"  # the first execution: A = 1, J = 0

        # Its kubelet has not stopped it yet when someone deletes the TrainJob (the garbage collector then
        # deletes the JobSet, its Jobs and the pod, which stays Terminating and Running).
        linger(e2e, pod_name)
        e2e.cp.admin.delete(TRAINER, "TrainJob", first.name, e2e.ns)

        async def trainjob_gone() -> None:
            assert e2e.get("TrainJob", first.name) is None

        await eventually(trainjob_gone, 60, "the TrainJob gone")
        with pytest.raises(AgentError) as err:
            await api.start(req)
        assert err.value.kind is ErrorKind.CONFLICT
        assert "an earlier TrainJob of that name left" in err.value.message
        assert f"{e2e.ns}/pod/{pod_name}" in (err.value.orphans or []), err.value.orphans
        assert e2e.get("TrainJob", first.name) is None  # nothing was written
        (still,) = e2e.pods(first.name)
        assert still["status"]["phase"] == "Running"  # a new TrainJob would have run beside it, A = 1 again

        # The kubelet stops it; the garbage collector and Trainer remove the rest.
        let_go(e2e, pod_name)

        async def all_gone() -> None:
            assert e2e.pods(first.name) == []
            assert e2e.get("JobSet", first.name, JOBSET) is None
            assert e2e.get("TrainingRuntime", first.name) is None

        await eventually(all_gone, 90, "everything of the earlier TrainJob gone")
        # Nothing left: nothing in the cluster says the name ran, so Start creates it (the supervisor's part
        # is not to ask, docs/contract.md).
        second = await api.start(req)
        assert second.uid != first.uid
        await api.stop(ref(second))
