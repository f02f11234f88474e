"""The chart's webhook configurations and policies are the Python generators' output, never edited by hand."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_templates_are_up_to_date():
    result = subprocess.run(
        [sys.executable, "charts/generate.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_no_ca_bundle_is_rendered():
    text = (ROOT / "charts/dispatch-k8s/templates/webhook-configurations.yaml").read_text()
    assert "caBundle" not in text
    assert "{{ .Release.Namespace }}" in text
