"""harness.tier_b.kwok_pod_stage_pace: kwok's pod stages without their random waits, a pod's annotations kept."""

from harness.tier_b import KWOK_POD_STEP_MS, kwok_pod_stage_pace


def _stage(name: str, delay: dict) -> dict:
    return {"metadata": {"name": name}, "spec": {"resourceRef": {"kind": "Pod"}, "delay": delay}}


def test_a_step_loses_its_jitter_and_keeps_the_pods_own_annotations():
    annotated = {"expressionFrom": '.metadata.annotations["pod-ready.stage.kwok.x-k8s.io/delay"]'}
    stage = _stage(
        "pod-ready", {"durationMilliseconds": 1000, "jitterDurationMilliseconds": 5000, "durationFrom": annotated}
    )
    paced = kwok_pod_stage_pace(stage)
    assert paced["spec"]["delay"] == {"durationMilliseconds": KWOK_POD_STEP_MS, "durationFrom": annotated}
    assert stage["spec"]["delay"]["jitterDurationMilliseconds"] == 5000  # the input is not changed


def test_a_deleted_pod_goes_after_one_step_not_at_a_random_moment_of_its_grace_period():
    stage = _stage(
        "pod-delete",
        {"durationMilliseconds": 1000, "jitterDurationFrom": {"expressionFrom": ".metadata.deletionTimestamp"}},
    )
    assert kwok_pod_stage_pace(stage)["spec"]["delay"] == {"durationMilliseconds": KWOK_POD_STEP_MS}


def test_the_chaos_stage_keeps_upstreams_timing():
    delay = {"durationMilliseconds": 1000, "jitterDurationMilliseconds": 1000}
    assert kwok_pod_stage_pace(_stage("pod-container-running-failed", dict(delay)))["spec"]["delay"] == delay
