"""The webhook's configuration file, validated at start-up with errors that name the bad key."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webhook.review import User

DEFAULT_DISPATCH_USERNAME: Final = "system:serviceaccount:dispatch-system:dispatch-k8s"
"""The agent's ServiceAccount as the chart installs it."""
DEFAULT_KUEUE_USERNAME: Final = "system:serviceaccount:kueue-system:kueue-controller-manager"


class Principals(BaseModel):
    """Who someone is: any of these usernames, or a member of any of these groups."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usernames: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def includes(self, user: User) -> bool:
        return user.username in self.usernames or any(g in self.groups for g in user.groups)


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    dispatch: Principals = Field(default_factory=lambda: Principals(usernames=(DEFAULT_DISPATCH_USERNAME,)))
    """dispatch's principals; everyone else is a stranger."""
    kueue: Principals = Field(default_factory=lambda: Principals(usernames=(DEFAULT_KUEUE_USERNAME,)))
    """Kueue's controller, which copies dispatch's gate from a TrainJob to its Workload."""
    allow_spec_prologue: bool = Field(False, alias="allowSpecPrologue")
    """Accept the spec's original prologue text too (with a warning: it can repeat or garble an epoch)."""
    allow_rank_restart: bool = Field(False, alias="allowRankRestart")
    """Accept runtimes that let a failed rank be replaced without a new execution identity."""


class ConfigError(ValueError):
    pass


def load_config(path: str | Path | None) -> Config:
    """The config from a YAML file (or the defaults); ConfigError names the bad key and why."""
    if path is None:
        return Config()
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    try:
        return Config.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"config {path}: {problems}") from None
