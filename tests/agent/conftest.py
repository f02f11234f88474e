from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agent import kueue_double


@pytest.fixture(autouse=True)
def _delete_admission_checks(request: pytest.FixtureRequest) -> Iterator[None]:
    """AdmissionChecks are cluster-scoped and outlive a test's namespace: delete the ones a test made, so
    later controllers in the session do not serve (and write Active on) a pile of them."""
    yield
    if "control_plane" in request.fixturenames:
        cp = request.getfixturevalue("control_plane")
        while kueue_double.created_checks:
            cp.admin.delete(kueue_double.KUEUE_V, "AdmissionCheck", kueue_double.created_checks.pop())
