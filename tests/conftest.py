import pytest

pytest_plugins = ["harness.pytest_plugin"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The campaign runs after every other test (after the tier sort, which it keeps: tier C is last already). As
    the session's last test its teardown stops only its worker nodes instead of deleting all it made and
    uninstalling the chart (about 35 s), since the session stops the cluster next (tests/chaos/test_chaos.py)."""
    items.sort(key=lambda item: item.path.as_posix().endswith("tests/chaos/test_chaos.py"))
