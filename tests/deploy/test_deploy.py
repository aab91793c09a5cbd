"""What an operator deploys: Prometheus config and rules (checked by promtool), the
Grafana dashboard and the Kubernetes manifests, all naming only metrics Earmark exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from earmark import cli
from earmark.core.reconcile import Reconciliation
from earmark.metrics import Metrics
from earmark.ops.reconcile_metrics import registry_of
from tests.helpers import binary_missing

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
PROMTOOL = shutil.which("promtool")
MISSING = binary_missing("promtool", "prometheus")
needs_promtool = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
METRIC = re.compile(r"\bearmark_[a-z_]*[a-z]\b")


def exported_names() -> set[str]:
    """Every sample name a sidecar's registry can export, with each label set exercised,
    and those `earmark reconcile` writes."""
    metrics = Metrics()
    names: set[str] = set()
    empty = Reconciliation((), ())
    reconciled = registry_of("openai", "key", empty, [], False, datetime.now(UTC))
    for family in [*metrics.registry.collect(), *reconciled.collect()]:
        names.add(family.name)
        names.update(s.name for s in family.samples)
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        names.update(family.name + suffix for suffix in suffixes.get(family.type, []))
    return names


def promtool(*args: str) -> str:
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS
    )
    assert 0 == result.returncode, result.stdout + result.stderr
    return result.stdout


@needs_promtool
def test_prometheus_config_is_valid() -> None:
    """`promtool check config` accepts the scrape config and finds the rule file."""
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml")


@needs_promtool
def test_alert_rules_are_valid() -> None:
    """`promtool check rules` accepts every alert rule."""
    assert "SUCCESS: 17 rules found" in promtool("check", "rules", "earmark-rules.yml")


@needs_promtool
def test_alert_rules_unit_tests_pass() -> None:
    """`promtool test rules` passes: the 80%, exhausted, overshoot, in-doubt, overage,
    meter-rejected and provider-forbidden alerts fire when due, and only then."""
    assert "SUCCESS" in promtool("test", "rules", "earmark-rules.test.yml")


def test_rules_and_dashboard_name_only_exported_metrics() -> None:
    """Every earmark_ metric the rules and the dashboard query is one Earmark exports."""
    known = exported_names()
    texts = [
        (PROMETHEUS / "earmark-rules.yml").read_text(),
        (DEPLOY / "grafana" / "earmark-dashboard.json").read_text(),
    ]
    used = {name for text in texts for name in METRIC.findall(text)}
    assert set() == used - known
    assert len(used) >= 10


def test_dashboard_is_grafana_json() -> None:
    """The dashboard loads as JSON with panels for admissions, held vs limit, overshoot and
    latency, each with a Prometheus query."""
    dashboard = json.loads((DEPLOY / "grafana" / "earmark-dashboard.json").read_text())
    titles = [p["title"] for p in dashboard["panels"]]
    for needed in ("Admissions", "vs limit", "Overshoot", "latency"):
        assert any(needed in t for t in titles), needed
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert all(t["expr"] for t in panel["targets"])
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_kubernetes_pod_runs_the_sidecar_with_probes_and_secret() -> None:
    """The manifest runs Earmark as the worker's native sidecar (started first, stopped
    last), with gRPC probes, resources, non-root settings and the database URL from a
    Secret; the worker finds it through EARMARK_TARGET."""
    docs = list(
        yaml.safe_load_all((DEPLOY / "kubernetes" / "worker-with-earmark.yaml").read_text())
    )
    kinds = {d["kind"]: d for d in docs}
    assert {"Secret", "Deployment", "NetworkPolicy"} == set(kinds)
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    sidecars = {c["name"]: c for c in pod["initContainers"]}
    # A native sidecar: started before the worker, stopped after it.
    assert ({"worker"}, {"earmark"}) == (set(containers), set(sidecars))
    earmark = sidecars["earmark"]
    assert "Always" == earmark["restartPolicy"]
    worker_env = {e["name"]: e["value"] for e in containers["worker"]["env"]}
    assert "127.0.0.1:50051" == worker_env["EARMARK_TARGET"]
    env = {e["name"]: e for e in earmark["env"]}
    # The probes reach the health-only listener; workers' gRPC stays on loopback.
    health_port = int(env["EARMARK_HEALTH_LISTEN"]["value"].rpartition(":")[2])
    assert {"port": health_port, "service": "earmark.v1.Budget"} == (
        earmark["readinessProbe"]["grpc"]
    )
    assert {"port": health_port} == earmark["livenessProbe"]["grpc"]
    assert "127.0.0.1:50051" == env["EARMARK_LISTEN"]["value"]
    assert earmark["resources"]["limits"]
    secret = env["EARMARK_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert kinds["Secret"]["metadata"]["name"] == secret["name"]
    assert pod["securityContext"]["runAsNonRoot"]


def test_metrics_text_parses() -> None:
    """A fresh registry renders Prometheus text that the reference parser reads back."""
    from prometheus_client import generate_latest

    text = generate_latest(Metrics().registry).decode()
    assert any(f.name == "earmark_database_up" for f in text_string_to_metric_families(text))


def test_every_alert_links_its_runbook() -> None:
    """Every alert's runbook_url points at a section of docs/runbooks.md named after it."""
    rules = yaml.safe_load((PROMETHEUS / "earmark-rules.yml").read_text())
    alerts = [r for group in rules["groups"] for r in group["rules"] if "alert" in r]
    runbooks = (DEPLOY.parent / "docs" / "runbooks.md").read_text()
    anchors = {line[3:].strip().lower() for line in runbooks.splitlines() if line.startswith("## ")}
    linked = {a["alert"]: a["annotations"]["runbook_url"] for a in alerts}
    assert {name: f"docs/runbooks.md#{name.lower()}" for name in linked} == linked
    assert {name.lower() for name in linked} == anchors


def test_every_metric_is_in_the_readme() -> None:
    """Every metric the sidecar registers has a row in the metrics table of the docs."""
    readme = (DEPLOY.parent / "docs" / "operations.md").read_text()
    documented = set()
    # A row's first cell may name several metrics: `earmark_budget_limit`, `_used`, ...
    for cell in re.findall(r"^\| (`earmark_[^|]*)\|", readme, re.MULTILINE):
        names = re.findall(r"`([a-z_]+)`", cell)
        stem = names[0].rsplit("_", 1)[0]
        documented |= {name if name.startswith("earmark_") else stem + name for name in names}
    registered = set()
    for family in Metrics().registry.collect():
        if family.name.startswith("earmark_"):
            suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
            registered.add(family.name + suffix)
    assert set() == registered - documented


def test_the_reconcile_cronjob_runs_a_command_the_cli_takes() -> None:
    """The CronJob's reconcile container runs `earmark reconcile` with flags the command
    line takes, against the sidecar in its own pod through the shared data dir's socket,
    with the provider's admin key mounted read-only rather than in its env."""
    (job,) = yaml.safe_load_all((DEPLOY / "kubernetes" / "reconcile-cronjob.yaml").read_text())
    spec = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (sidecar,) = spec["initContainers"]
    (reconcile,) = spec["containers"]
    args = cli.parser().parse_args(reconcile["args"])
    mounts = {m["name"]: m for m in reconcile["volumeMounts"]}
    sidecar_env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert ("openai", True, "Always", True) == (
        args.provider,
        args.apply,
        sidecar["restartPolicy"],
        mounts["provider-admin-key"]["readOnly"],
    )
    assert str(args.data_dir) == sidecar_env["EARMARK_DATA_DIR"]
    assert not any("KEY" in e["name"] for e in reconcile.get("env", []))
