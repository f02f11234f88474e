"""Configuration files of the servers: YAML into a pydantic model, with errors that name the bad key."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


class ConfigError(ValueError):
    pass


def load_yaml_model(path: str | Path | None, model: type[Model]) -> Model:
    """``model`` from a YAML file (its defaults when ``path`` is None); ConfigError names the bad key and why."""
    if path is None:
        return model()
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"config {path}: {problems}") from None
