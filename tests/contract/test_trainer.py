import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.errors import ContractError
from contract.prologue import PROLOGUE, prologue_argv
from contract.trainer import (
    ARGS_MAX,
    check_env_name,
    escape_expansion,
    prefixes_from_env,
    trainer_args,
    trainer_command,
    trainer_env,
    trainer_spec,
)
from harness.fixtures import JOB_ID
from tests.harness.kubelet import expand

ENV = {"HOME": "/root", "DISPATCH_JOB_ID": JOB_ID, "X": "$(HOME)"}


@given(text=st.text(alphabet=st.sampled_from("$()ab{}X \\'\"\n"), max_size=40))
def test_escaped_text_survives_the_kubelets_expansion(text):
    assert expand(escape_expansion(text), ENV) == text


def test_without_escaping_the_kubelet_would_change_words():
    # Why escape_expansion exists: both of these would reach the process changed.
    assert expand("echo $$", ENV) == "echo $"
    assert expand("$(HOME)/x", ENV) == "/root/x"


def test_the_command_runs_the_shipped_prologue_as_the_kubelet_expands_it():
    cmd = trainer_command()
    assert [expand(w, ENV) for w in cmd] == ["/bin/sh", "/var/run/dispatch-k8s/prologue/prologue.sh"]
    user = ["python", "-c", "print('$(HOME) $$')"]
    argv = [expand(w, ENV) for w in cmd + trainer_args(user, ["--x", ""])]
    assert argv == prologue_argv([*user, "--x", ""])


def test_the_text_is_in_no_word_of_the_command():
    """Trainer copies the command into the JobSet, its Jobs, their pods and the Workload: the text stays out."""
    assert sum(map(len, trainer_command())) < 64 < len(PROLOGUE)


def test_the_users_words_all_sit_in_args():
    assert trainer_args(["python", "train.py"], ["--lr", "0.1"]) == ["python", "train.py", "--lr", "0.1"]
    assert len(trainer_args(["a"] * 100, ["b"] * 28)) == ARGS_MAX


@pytest.mark.parametrize(
    ("command", "args", "field"),
    [
        ([], [], "command"),
        ("python train.py", [], "command"),
        (["python"], "x", "command"),
        (["py\x00thon"], [], "command[0]"),
        (["python"], [None], "args[0]"),
        (["a"] * 100, ["b"] * 29, "args"),
        ([""], [], "command[0]"),
        (["-c", "x"], [], "command[0]"),
    ],
)
def test_args_refusals(command, args, field):
    with pytest.raises(ContractError) as err:
        trainer_args(command, args)
    assert err.value.field == field


def env(**kw):
    values = {"job_id": JOB_ID, "g": 1, "n": 3, "attempt": 2, "env": {}, "workdir": None}
    values.update(kw)
    return trainer_env(**values)


def test_env_order_user_sorted_then_dispatch():
    names = [e["name"] for e in env(env={"b": "1", "A": "2", "a": "3"}, workdir="/w")]
    assert names == [
        "A", "a", "b",
        "DISPATCH_JOB_ID", "DISPATCH_SUBMISSION", "DISPATCH_K8S_EPOCH_PREFIX", "DISPATCH_K8S_TOKEN_PREFIX",
        "DISPATCH_K8S_ADMISSION", "DISPATCH_K8S_RESTART", "DISPATCH_K8S_WORKDIR",
    ]  # fmt: skip


def test_env_values():
    by_name = {e["name"]: e for e in env(workdir="/my work")}
    assert by_name["DISPATCH_JOB_ID"]["value"] == JOB_ID
    assert by_name["DISPATCH_SUBMISSION"]["value"] == "3"
    assert by_name["DISPATCH_K8S_EPOCH_PREFIX"]["value"] == "1000003"
    assert by_name["DISPATCH_K8S_TOKEN_PREFIX"]["value"] == f"{JOB_ID}.3.2"
    assert by_name["DISPATCH_K8S_ADMISSION"]["valueFrom"]["fieldRef"] == {
        "apiVersion": "v1",
        "fieldPath": "metadata.annotations['dispatch.phpboyscout.uk/admission']",
    }
    assert by_name["DISPATCH_K8S_RESTART"]["valueFrom"]["fieldRef"] == {
        "apiVersion": "v1",
        "fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']",
    }
    assert by_name["DISPATCH_K8S_WORKDIR"]["value"] == "/my work"
    assert "DISPATCH_K8S_WORKDIR" not in {e["name"] for e in env()}


def test_empty_values_are_written_as_the_api_returns_them():
    by_name = {e["name"]: e for e in env(g=0, n=0, env={"EMPTY": ""})}
    assert by_name["DISPATCH_K8S_EPOCH_PREFIX"] == {"name": "DISPATCH_K8S_EPOCH_PREFIX"}
    assert by_name["EMPTY"] == {"name": "EMPTY"}


def test_user_env_values_are_escaped():
    by_name = {e["name"]: e for e in env(env={"P": "$(HOME)"})}
    assert expand(by_name["P"]["value"], ENV) == "$(HOME)"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("DISPATCH_EPOCH", "reserved for dispatch"),
        ("DISPATCH_", "reserved for dispatch"),
        ("", "non-empty"),
        ("A=B", "without '='"),
        ("A\nB", "printable ASCII"),
        ("É", "printable ASCII"),
        (3, "non-empty string"),
    ],
)
def test_env_name_refusals(name, says):
    with pytest.raises(ContractError) as err:
        check_env_name(name)
    assert says in str(err.value)
    with pytest.raises(ContractError):
        env(env={name: "v"})


def test_env_refusals():
    with pytest.raises(ContractError, match="NUL"):
        env(env={"A": "x\x00"})
    with pytest.raises(ContractError, match="mapping"):
        env(env=[("A", "1")])
    with pytest.raises(ContractError) as err:
        env(workdir="")
    assert err.value.field == "WorkDir"
    with pytest.raises(ContractError):
        env(n=-1)


def test_trainer_spec_and_image_refusals():
    spec = trainer_spec(
        job_id=JOB_ID, g=0, n=1, attempt=0, image="img:1", command=["run"], args=[], env={}, workdir=None
    )
    assert spec["image"] == "img:1"
    assert spec["command"] == trainer_command()
    assert spec["args"] == ["run"]
    for bad in ["", " ", "img:1 ", None]:
        with pytest.raises(ContractError) as err:
            trainer_spec(job_id=JOB_ID, g=0, n=1, attempt=0, image=bad, command=["run"], args=[], env={}, workdir=None)
        assert err.value.field == "image"


def test_prefixes_from_env():
    assert prefixes_from_env(env(g=2, n=5, attempt=4)) == (JOB_ID, 2, 5, 4)
    with pytest.raises(ContractError, match="has no DISPATCH_K8S_EPOCH_PREFIX"):
        prefixes_from_env([{"name": "X", "value": "1"}])
    with pytest.raises(ContractError):
        prefixes_from_env("junk")
