"""Prometheus metrics kept in memory and written in the text exposition format (version 0.0.4) by hand.

Counters, gauges and histograms with fixed label names are all the webhook and the agent expose; a client
library would be a dependency for a few dozen lines. Each metric renders its own HELP/TYPE header even
with no samples, so a scrape always shows what exists.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Final

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

LabelValues = tuple[str, ...]


class _Metric:
    type_name: str = ""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)

    def _key(self, labels: Sequence[str]) -> LabelValues:
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(labels)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.type_name}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    """A monotonic count per label set. ``samples`` is the live dict (label values -> count)."""

    type_name = "counter"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self.samples: dict[LabelValues, int | float] = {}

    def inc(self, *labels: str, amount: int | float = 1) -> None:
        key = self._key(labels)
        self.samples[key] = self.samples.get(key, 0) + amount

    def set_total(self, value: int | float, *labels: str) -> None:
        """For a count kept elsewhere (e.g. by the certificate reloader): the total as it stands."""
        self.samples[self._key(labels)] = value

    def render(self) -> list[str]:
        return self.header() + [
            f"{self.name}{labels(zip(self.labelnames, k, strict=True))} {number(v)}" for k, v in self.samples.items()
        ]


class Gauge(_Metric):
    type_name = "gauge"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self.samples: dict[LabelValues, int | float] = {}

    def set(self, value: int | float, *labels: str) -> None:
        self.samples[self._key(labels)] = value

    def render(self) -> list[str]:
        return self.header() + [
            f"{self.name}{labels(zip(self.labelnames, k, strict=True))} {number(v)}" for k, v in self.samples.items()
        ]


class Histogram(_Metric):
    """Observations in fixed buckets (upper bounds, seconds or whatever the name says), per label set."""

    type_name = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Sequence[float], labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        if list(buckets) != sorted(set(buckets)):
            raise ValueError(f"{name}: buckets must increase strictly")
        self.buckets = tuple(buckets)
        # Stored non-cumulative (one increment per observation) and summed when rendered.
        self._counts: dict[LabelValues, list[int]] = {}
        self._sums: dict[LabelValues, float] = {}

    def observe(self, value: float, *labels: str) -> None:
        key = self._key(labels)
        counts = self._counts.setdefault(key, [0] * (len(self.buckets) + 1))
        counts[bisect.bisect_left(self.buckets, value)] += 1  # le: a value on a bound counts in that bucket
        self._sums[key] = self._sums.get(key, 0.0) + value

    def count(self, *labels: str) -> int:
        return sum(self._counts.get(self._key(labels), ()))

    def render(self) -> list[str]:
        lines = self.header()
        for key, counts in self._counts.items():
            pairs = list(zip(self.labelnames, key, strict=True))
            cumulative = 0
            for bound, n in zip((*self.buckets, math.inf), counts, strict=True):
                cumulative += n
                le = "+Inf" if bound == math.inf else repr(float(bound))
                lines.append(f"{self.name}_bucket{labels([*pairs, ('le', le)])} {cumulative}")
            lines.append(f"{self.name}_sum{labels(pairs)} {self._sums[key]!r}")
            lines.append(f"{self.name}_count{labels(pairs)} {cumulative}")
        return lines


def render(metrics: Iterable[_Metric]) -> str:
    """The exposition text of ``metrics``, in the order given."""
    lines: list[str] = []
    for metric in metrics:
        lines += metric.render()
    return "\n".join(lines) + "\n"


def number(value: int | float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def labels(pairs: Iterable[tuple[str, str]]) -> str:
    text = ",".join(f'{k}="{escape(v)}"' for k, v in pairs)
    return "{" + text + "}" if text else ""


def escape(value: str) -> str:
    # The exposition format's escapes; lone surrogates (valid in a JSON string, not in UTF-8) are replaced
    # so that rendering can never fail.
    value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
