"""The campaign's records: JSON lines under the run folder, one file per stream (calls, schedule, attacks),
each line stamped with the host's clock when it is written. Thread-safe: traffic, nemesis and attacker write
from their own threads."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Recorder:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._lock = threading.Lock()

    def write(self, stream: str, fields: dict[str, Any]) -> None:
        line = json.dumps({"t": time.time(), **fields}, default=str)
        with self._lock, (self.run_dir / f"{stream}.jsonl").open("a") as f:
            f.write(line + "\n")

    def to(self, stream: str) -> Callable[..., None]:
        """A `record(**fields)` for one stream."""
        return lambda **fields: self.write(stream, fields)


def read(run_dir: Path, stream: str) -> list[dict[str, Any]]:
    path = run_dir / f"{stream}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
