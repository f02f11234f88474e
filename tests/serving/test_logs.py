"""serving/logs.py: --log-level and --log-format, a decision's keys as fields in both formats."""

from __future__ import annotations

import argparse
import io
import json
import logging
from collections.abc import Iterator

import pytest

from serving import logs


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name in logs.QUIET:
        logging.getLogger(name).setLevel(logging.NOTSET)


def _configured(level: str, fmt: str) -> io.StringIO:
    stream = io.StringIO()
    logs.configure(level, fmt, stream)
    return stream


def test_json_lines_carry_the_decision_keys(restore_logging: None):
    stream = _configured("info", "json")
    log = logging.getLogger("agent.gate.reconcile")
    log.info("Workload %s: admit", "ns/wl", extra=logs.fields(workload="ns/wl", a=2, outcome="admit", trainjob=None))
    log.debug("not shown at info")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["msg"] == "Workload ns/wl: admit"
    assert (first["level"], first["logger"]) == ("info", "agent.gate.reconcile")
    assert (first["workload"], first["a"], first["outcome"]) == ("ns/wl", 2, "admit")
    assert "trainjob" not in first  # None values are left out
    assert first["time"].endswith("+00:00")
    assert second["level"] == "error"
    assert "RuntimeError: boom" in second["exception"]


def test_text_lines_end_with_the_keys_as_pairs(restore_logging: None):
    stream = _configured("debug", "text")
    log = logging.getLogger("webhook.server")
    log.debug("review u1: denied", extra=logs.fields(review_uid="u1", rule="creation", why="a b", empty=""))
    line = stream.getvalue().rstrip("\n")
    assert line.endswith('webhook.server: review u1: denied review_uid=u1 rule=creation why="a b" empty=""')
    assert " DEBUG " in line


def test_the_level_filters_and_the_libraries_never_go_below_info(restore_logging: None):
    stream = _configured("debug", "json")
    logging.getLogger("kubernetes_asyncio.client.rest").debug("response body: a Secret's private key")
    logging.getLogger("dispatch-certs").debug("ours")
    assert [json.loads(line)["msg"] for line in stream.getvalue().splitlines()] == ["ours"]
    stream = _configured("warning", "json")
    logging.getLogger("dispatch-certs").info("hidden")
    assert stream.getvalue() == ""


def test_the_flags_refuse_what_is_not_a_level_or_a_format(capsys: pytest.CaptureFixture[str]):
    parser = argparse.ArgumentParser()
    logs.add_arguments(parser)
    assert vars(parser.parse_args([])) == {"log_level": "info", "log_format": "text"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-format", "xml"])
    assert "invalid choice: 'xml'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not one of"):
        logs.configure("loud", "text")


def test_a_key_a_log_record_has_of_its_own_is_renamed_not_fatal(restore_logging: None):
    stream = _configured("info", "json")
    logging.getLogger("x").info("m", extra=logs.fields(name="wl", message="text", module="m"))
    line = json.loads(stream.getvalue())
    assert (line["name_"], line["message_"], line["module_"], line["msg"]) == ("wl", "text", "m", "m")
