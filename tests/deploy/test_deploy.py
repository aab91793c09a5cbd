"""What an operator deploys: Prometheus config and rules (checked by promtool), the
Grafana dashboard and the Kubernetes manifests, all naming only metrics Earmark exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from earmark import cli, limits
from earmark import settings as earmark_settings
from earmark.core.reconcile import Reconciliation
from earmark.metrics import Metrics
from earmark.ops.reconcile_metrics import registry_of
from tests.deploy.rendered import (
    BASE,
    DEPLOY,
    OVERLAY,
    both,
    needs_kubectl,
    pod_specs,
    rendered,
    resource,
)
from tests.helpers import binary_missing
from tests.test_docs_links import anchor

PROMETHEUS = DEPLOY / "prometheus"
ROOT = DEPLOY.parent
# Where every alert's runbook_url points, followed by the alert's anchor (deploy/README.md).
RUNBOOKS = "https://github.com/earmark/earmark/blob/main/docs/runbooks.md"
# The image the README builds, pushes and names in the example overlay.
IMAGE_TAG = "registry.example.com/earmark:0.1.0"
# `kubectl create secret generic NAME --from-file=KEY=...` (or --from-literal) in the README.
CREATE_SECRET = re.compile(
    r"kubectl (?:-n \S+ )?create secret generic (\S+) --from-(?:file|literal)=([\w.-]+)="
)
# The Namespace each rendering admits Prometheus's pods from: the base's default, and the
# example overlay's.
PROMETHEUS_NAMESPACE = {BASE: "monitoring", OVERLAY: "observability"}
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
    assert "SUCCESS: 22 rules found" in promtool("check", "rules", "earmark-rules.yml")


@needs_promtool
def test_alert_rules_unit_tests_pass() -> None:
    """`promtool test rules` passes: the 80%, exhausted, overshoot, in-doubt, overage,
    meter-rejected, provider-forbidden and price-check alerts fire when due, and only
    then."""
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


def created_secrets() -> dict[str, str]:
    """The Secrets deploy/kubernetes/README.md has the operator create: name to key."""
    return dict(CREATE_SECRET.findall((BASE / "README.md").read_text()))


def prometheus_peer(namespace: str) -> dict[str, Any]:
    """A NetworkPolicy peer: Prometheus's pods in that namespace."""
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }


@needs_kubectl
@both
def test_the_base_and_the_overlay_render_what_an_operator_applies(directory: Path) -> None:
    """`kubectl kustomize` renders the base and the example overlay, without a warning, into
    the worker with its sidecar, the webhooks receiver and its Service, their
    NetworkPolicies, the reconcile and prices CronJobs and the PrometheusRule: no Secret,
    and in the overlay every resource in its namespace."""
    docs = rendered(directory)
    assert {
        ("Deployment", "ai-worker"),
        ("NetworkPolicy", "ai-worker-earmark"),
        ("Deployment", "earmark-kinde-webhooks"),
        ("Service", "earmark-kinde-webhooks"),
        ("NetworkPolicy", "earmark-kinde-webhooks"),
        ("CronJob", "earmark-reconcile-openai"),
        ("CronJob", "earmark-prices-openai"),
        ("PrometheusRule", "earmark"),
    } == {(d["kind"], d["metadata"]["name"]) for d in docs}
    namespaces = {d["metadata"].get("namespace") for d in docs}
    assert ({None} if directory == BASE else {"earmark"}) == namespaces


@needs_kubectl
@both
def test_kubernetes_pod_runs_the_sidecar_with_probes_and_secret(directory: Path) -> None:
    """The manifest runs Earmark as the worker's native sidecar (started first, stopped
    last), with gRPC probes (started and ready only once the Budget service, that is the
    database, is SERVING), resources, non-root settings and the database URL from the Secret
    the operator creates; the worker finds it through EARMARK_TARGET."""
    docs = rendered(directory)
    pod = resource(docs, "Deployment", "ai-worker")["spec"]["template"]["spec"]
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
    budget_service = {"port": health_port, "service": "earmark.v1.Budget"}
    assert (budget_service, budget_service) == (
        earmark["startupProbe"]["grpc"],
        earmark["readinessProbe"]["grpc"],
    )
    assert {"port": health_port} == earmark["livenessProbe"]["grpc"]
    assert "127.0.0.1:50051" == env["EARMARK_LISTEN"]["value"]
    assert earmark["resources"]["limits"]
    # The sidecar gives up on its database first, with its own line, then the kubelet.
    startup = earmark["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] > database_wait(env)
    # The Secret and key the README's `kubectl create secret` makes, not an applied file.
    secret = env["EARMARK_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert created_secrets().get(secret["name"]) == secret["key"]
    assert [] == [d for d in docs if d["kind"] == "Secret"]
    assert pod["securityContext"]["runAsNonRoot"]


def database_wait(env: dict[str, dict[str, Any]]) -> float:
    """How long the sidecar with this env waits for its database before it exits."""
    if "EARMARK_DATABASE_WAIT_SECONDS" in env:
        return float(env["EARMARK_DATABASE_WAIT_SECONDS"]["value"])
    return limits.database_wait_seconds_default


@needs_kubectl
@both
def test_every_secret_read_is_created_by_the_operator(directory: Path) -> None:
    """Every Secret a pod reads (an env reference or a volume) is one deploy/kubernetes/
    README.md has the operator create with `kubectl create secret generic`, with the key the
    pod reads; no file under deploy/ applies a Secret, so no apply resets one."""
    read: dict[str, set[str]] = {}
    for spec in pod_specs(rendered(directory)).values():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    read.setdefault(ref["name"], set()).add(ref["key"])
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                read.setdefault(volume["secret"]["secretName"], set())
    created = created_secrets()
    assert ({"earmark-database", "openai-admin-key"}, set()) == (
        set(read),
        set(read) - set(created),
    )
    # An env reference reads the one key the README's command creates.
    assert {name: {created[name]} for name, keys in read.items() if keys} == {
        name: keys for name, keys in read.items() if keys
    }
    manifests = [*DEPLOY.glob("kubernetes*/**/*.yaml"), *DEPLOY.glob("kubernetes*/**/*.yml")]
    applied = [p for p in manifests if re.search(r"^kind: Secret$", p.read_text(), re.M)]
    assert ([], True) == (applied, len(manifests) >= 5)


@needs_kubectl
@both
def test_metrics_are_admitted_from_prometheus_alone(directory: Path) -> None:
    """The sidecar's NetworkPolicy admits its metrics port (budget ids, limits and use) from
    Prometheus's pods alone, and nothing else: not the health port, which only the kubelet
    probes from the node; the webhooks receiver's admits Prometheus and the ingress
    controller, and no rule anywhere admits every pod."""
    docs = rendered(directory)
    prometheus = prometheus_peer(PROMETHEUS_NAMESPACE[directory])
    worker = resource(docs, "Deployment", "ai-worker")["spec"]["template"]
    (earmark,) = worker["spec"]["initContainers"]
    env = {e["name"]: e.get("value") for e in earmark["env"]}
    metrics_port = int(env["EARMARK_METRICS_LISTEN"].rpartition(":")[2])
    assert str(metrics_port) == worker["metadata"]["annotations"]["prometheus.io/port"]
    policy = resource(docs, "NetworkPolicy", "ai-worker-earmark")["spec"]
    assert worker["metadata"]["labels"] == policy["podSelector"]["matchLabels"]
    assert [{"from": [prometheus], "ports": [{"port": metrics_port, "protocol": "TCP"}]}] == (
        policy["ingress"]
    )
    webhooks = resource(docs, "NetworkPolicy", "earmark-kinde-webhooks")["spec"]
    (rule,) = webhooks["ingress"]
    assert (True, [{"port": 8788, "protocol": "TCP"}]) == (
        prometheus in rule["from"],
        rule["ports"],
    )
    policies = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy"]
    assert all(rule.get("from") for p in policies for rule in p["ingress"])


@needs_kubectl
@both
def test_the_overlay_sets_the_image_the_makefile_builds(directory: Path) -> None:
    """The base names its images by name alone, and the example overlay sets them (kustomize
    `images:`) to the tag deploy/README.md builds with `make image` and pushes."""
    images = {
        container["image"]
        for spec in pod_specs(rendered(directory)).values()
        for container in [*spec.get("initContainers", []), *spec["containers"]]
    }
    expected = {
        BASE: {"earmark", "ai-worker"},
        OVERLAY: {IMAGE_TAG, "registry.example.com/ai-worker:1.0.0"},
    }
    assert expected[directory] == images
    readme = (DEPLOY / "README.md").read_text()
    assert (True, True) == (
        f"make image TAG={IMAGE_TAG}" in readme,
        f"docker push {IMAGE_TAG}" in readme,
    )


def test_make_image_builds_the_dockerfile_with_the_given_tag() -> None:
    """`make image TAG=...` builds deploy/docker/Dockerfile from the repository's root with
    that tag (docker stood in for by echo: no Docker engine here), and without a tag it
    stops and says how to give one."""
    make = ["make", "--no-print-directory", "-s", "image", "DOCKER=echo"]
    tagged = subprocess.run(
        [*make, f"TAG={IMAGE_TAG}"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    untagged = subprocess.run(make, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (0, f"build -f deploy/docker/Dockerfile -t {IMAGE_TAG} .\n") == (
        tagged.returncode,
        tagged.stdout,
    )
    assert (2, True) == (untagged.returncode, "make image TAG=" in untagged.stderr)


@needs_kubectl
@both
def test_the_prometheusrule_carries_the_shipped_rules(directory: Path) -> None:
    """The PrometheusRule's groups are deploy/prometheus/earmark-rules.yml's, which promtool
    checks and tests; the overlay adds the label its Prometheus Operator selects by."""
    rule = resource(rendered(directory), "PrometheusRule", "earmark")
    assert yaml.safe_load((PROMETHEUS / "earmark-rules.yml").read_text()) == rule["spec"]
    labels = rule["metadata"]["labels"]
    assert (directory == OVERLAY) == (labels.get("release") == "kube-prometheus-stack")


def test_metrics_text_parses() -> None:
    """A fresh registry renders Prometheus text that the reference parser reads back."""
    from prometheus_client import generate_latest

    text = generate_latest(Metrics().registry).decode()
    assert any(f.name == "earmark_database_up" for f in text_string_to_metric_families(text))


def test_every_alert_links_its_runbook() -> None:
    """Every alert's runbook_url is the one base URL deploy/README.md documents followed by
    the anchor of a section of docs/runbooks.md named after the alert, one section each."""
    rules = yaml.safe_load((PROMETHEUS / "earmark-rules.yml").read_text())
    alerts = [r for group in rules["groups"] for r in group["rules"] if "alert" in r]
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    anchors = {anchor(line[3:]) for line in runbooks.splitlines() if line.startswith("## ")}
    linked = {a["alert"]: a["annotations"]["runbook_url"] for a in alerts}
    assert {name: f"{RUNBOOKS}#{name.lower()}" for name in linked} == linked
    assert {name.lower() for name in linked} == anchors
    assert RUNBOOKS in (DEPLOY / "README.md").read_text()


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


@needs_kubectl
@both
def test_the_reconcile_cronjob_runs_a_command_the_cli_takes(directory: Path) -> None:
    """The CronJob's reconcile container runs `earmark reconcile` with flags the command
    line takes, against the sidecar in its own pod through the shared data dir's socket,
    started once that sidecar's database answers, with the provider's admin key mounted
    read-only rather than in its env."""
    spec = pod_specs(rendered(directory))["earmark-reconcile-openai"]
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
    # The key file is the key the README's command creates, in the Secret's mount.
    (volume,) = [v for v in spec["volumes"] if v["name"] == "provider-admin-key"]
    key = created_secrets()[volume["secret"]["secretName"]]
    assert f"{mounts['provider-admin-key']['mountPath']}/{key}" == str(args.admin_key_file)
    health_port = int(str(sidecar_env["EARMARK_HEALTH_LISTEN"]).rpartition(":")[2])
    startup = sidecar["startupProbe"]
    assert {"port": health_port, "service": "earmark.v1.Budget"} == startup["grpc"]
    assert startup["periodSeconds"] * startup["failureThreshold"] > (
        limits.database_wait_seconds_default
    )


@needs_kubectl
@both
def test_the_prices_cronjob_imports_then_checks_through_its_own_sidecar(directory: Path) -> None:
    """The prices CronJob runs `earmark prices import` (an init container, after the native
    sidecar is started once its database answers) then `earmark prices check` (the job's
    container), with flags the command line takes, against the sidecar in its own pod
    through the shared data dir's socket; a check's exit 3 is not retried; its pod, sidecar
    and containers are confined as the reconcile CronJob's are, and read no Secret but the
    database's."""
    docs = rendered(directory)
    job = resource(docs, "CronJob", "earmark-prices-openai")["spec"]["jobTemplate"]["spec"]
    spec = job["template"]["spec"]
    sidecar, importing = spec["initContainers"]
    (checking,) = spec["containers"]
    reconciling = pod_specs(docs)["earmark-reconcile-openai"]
    imported = cli.parser().parse_args(importing["args"])
    checked = cli.parser().parse_args(checking["args"])
    sidecar_env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert (("prices", "import", "openai"), ("prices", "check", "openai")) == (
        (imported.command, imported.verb, imported.provider),
        (checked.command, checked.verb, checked.provider),
    )
    assert (0, "Never", "Always", None) == (
        job["backoffLimit"],
        spec["restartPolicy"],
        sidecar["restartPolicy"],
        importing.get("restartPolicy"),
    )
    assert {sidecar_env["EARMARK_DATA_DIR"]} == {
        str(imported.data_dir),
        str(checked.data_dir),
    }
    (reconcile_sidecar,) = reconciling["initContainers"]
    assert reconcile_sidecar == sidecar
    assert (reconciling["securityContext"], reconciling["volumes"][:1]) == (
        spec["securityContext"],
        spec["volumes"],
    )
    (reconcile,) = reconciling["containers"]
    assert [reconcile["securityContext"]] * 2 == [
        importing["securityContext"],
        checking["securityContext"],
    ]
    assert [] == [e for c in (importing, checking) for e in c.get("env", [])]


def test_the_image_installs_what_the_prices_cronjob_runs() -> None:
    """The image installs the server and the prices extra (genai-prices, which `earmark
    prices import` and `check` read), and the prices extra is one pyproject declares."""
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text()
    install = re.search(r"pip install [^\n]*'\.\[([a-z,]+)\]'", dockerfile)
    assert install is not None
    extras = set(install[1].split(","))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert ({"server", "prices"}, set()) == (
        extras,
        extras - set(declared["optional-dependencies"]),
    )


@needs_kubectl
@both
def test_every_grpc_probe_reaches_a_listener_off_loopback(directory: Path) -> None:
    """The kubelet's gRPC probes connect to the pod's IP: every container probed on a port
    serves its health listener there on every address, not on loopback."""
    probed = []
    for name, spec in pod_specs(rendered(directory)).items():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            ports = {
                probe["grpc"]["port"]
                for kind in ("startupProbe", "readinessProbe", "livenessProbe")
                if "grpc" in (probe := container.get(kind) or {})
            }
            if not ports:
                continue
            env = {item["name"]: item.get("value", "") for item in container.get("env", [])}
            listen = env.get("EARMARK_HEALTH_LISTEN", "")
            probed.append(
                (name, listen.rsplit(":", 1)[0], {int(listen.rsplit(":", 1)[1])} == ports)
            )
    assert [(name, "0.0.0.0", True) for name, _, _ in probed] == probed
    assert len(probed) >= 2


# The regions' overlays (docs/regions.md): a budgets' home and a region admitting from
# shares of them, each on the base.
REGIONS = DEPLOY / "kubernetes-overlays" / "regions"
regions = pytest.mark.parametrize(
    "directory", [REGIONS / "home", REGIONS / "region"], ids=["home", "region"]
)


def region_sidecar(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:
    """The worker pod's Earmark container, and the settings `earmark serve` loads from its
    args (the flags the command line takes) and its env."""
    spec = resource(docs, "Deployment", "ai-worker")["spec"]["template"]["spec"]
    (earmark,) = [c for c in spec["initContainers"] if c["name"] == "earmark"]
    args = cli.parser().parse_args(earmark["args"])
    flags = {k: v for k, v in vars(args).items() if k != "command"}
    env = {e["name"]: str(e["value"]) for e in earmark["env"] if "value" in e}
    assert "serve" == args.command
    return earmark, earmark_settings.load(flags, env)


@needs_kubectl
@regions
def test_the_region_overlays_render_a_home_and_a_region(directory: Path) -> None:
    """`kubectl kustomize` renders each regions overlay without a warning into the base's
    resources (the home adds the Service and NetworkPolicy of its region listener), every
    one in the namespace; the sidecar's args are flags `earmark serve` takes, and its settings
    load from them and its env as the sidecar would load them (a listener off loopback
    plaintext only with the base's EARMARK_INSECURE_LISTEN, a home's with region tokens)."""
    docs = rendered(directory)
    base = {(d["kind"], d["metadata"]["name"]) for d in rendered(BASE)}
    listener = {("Service", "earmark-regions"), ("NetworkPolicy", "ai-worker-earmark-regions")}
    home = directory.name == "home"
    assert (base | listener if home else base) == {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {"earmark"} == {d["metadata"].get("namespace") for d in docs}
    _, settings = region_sidecar(docs)
    if home:
        assert ("us", "", "0.0.0.0:50061", True) == (
            settings.region,
            settings.home,
            settings.region_listen,
            settings.region_token_file is not None,
        )
    else:
        assert ("eu", "earmark-regions.us.example.internal:50061", "", True) == (
            settings.region,
            settings.home,
            settings.region_listen,
            settings.home_token_file is not None,
        )


@needs_kubectl
@regions
def test_the_region_overlays_read_tokens_their_readme_creates(directory: Path) -> None:
    """The token file a regions overlay's sidecar reads is in a Secret mounted read-only,
    under the key that regions/README.md's `kubectl create secret` gives it; no Secret is
    applied."""
    docs = rendered(directory)
    earmark, settings = region_sidecar(docs)
    spec = resource(docs, "Deployment", "ai-worker")["spec"]["template"]["spec"]
    path = settings.region_token_file or settings.home_token_file
    assert path is not None
    (mount,) = [m for m in earmark["volumeMounts"] if str(path.parent) == m["mountPath"]]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    created = dict(CREATE_SECRET.findall((REGIONS / "README.md").read_text()))
    assert (True, path.name) == (mount["readOnly"], created[volume["secret"]["secretName"]])
    assert [] == [d for d in docs if d["kind"] == "Secret"]


@needs_kubectl
def test_the_region_reaches_the_homes_region_listener() -> None:
    """The home's Service sends its port to the sidecars' region listener, admitted by the
    NetworkPolicy from the addresses the load balancer admits; the region's --home names
    that port."""
    docs = rendered(REGIONS / "home")
    earmark, settings = region_sidecar(docs)
    listen_port = int(settings.region_listen.rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in earmark["ports"]}
    service = resource(docs, "Service", "earmark-regions")["spec"]
    (port,) = service["ports"]
    assert (listen_port, 50061) == (ports[port["targetPort"]], port["port"])
    worker = resource(docs, "Deployment", "ai-worker")["spec"]["template"]["metadata"]
    assert worker["labels"] == service["selector"]
    policy = resource(docs, "NetworkPolicy", "ai-worker-earmark-regions")["spec"]
    (rule,) = policy["ingress"]
    assert [{"ipBlock": {"cidr": c}} for c in service["loadBalancerSourceRanges"]] == rule["from"]
    assert [{"port": listen_port, "protocol": "TCP"}] == rule["ports"]
    _, region = region_sidecar(rendered(REGIONS / "region"))
    assert port["port"] == int(region.home.rpartition(":")[2])
