"""Earmark's adapter for the Cycles SDK Recovery Conformance Profile's runner
(scripts/run_client_recovery_conformance.py of runcycles/cycles-protocol). From a checkout
of that repository, with this repository's virtual environment (it has pytest and PyYAML):

    /path/to/earmark/.venv/bin/python scripts/run_client_recovery_conformance.py \\
        --claim core --adapter /path/to/earmark/.venv/bin/python \\
        /path/to/earmark/tests/client/recovery_profile_adapter.py

The runner starts this once per scenario, writes the scenario's inputs (id, level, name,
precondition, faults) on stdin and appends its id. This reads the id's binding from
recovery_profile_scenarios.json, checks that the inputs are those the binding was made
against (a changed catalog must be bound again), runs the bound Python tests and the
scenario's TypeScript tests (test_typescript_scenario[ID], which runs
clients/typescript/test/recovery-profile.test.mjs's tests of that id) with pytest, and
prints one JSON result. It passes only when those tests passed and the binding says the
scenario is met; otherwise its diagnostic says why. pytest's output goes to stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BINDINGS = HERE / "recovery_profile_scenarios.json"
MODULE = "tests/client/test_recovery_profile.py"
TS_FILE = "clients/typescript/test/recovery-profile.test.mjs"
INPUTS = ("id", "level", "name", "precondition", "faults")
# The statuses under which Earmark claims a scenario (docs/recovery-conformance.md).
MET = frozenset({"met", "met under the mapping"})


def result(scenario_id: str, binding: dict[str, Any] | None, diagnostic: str = "") -> None:
    """Prints the runner's result: passed when diagnostic is empty."""
    tests: list[str] = []
    if binding is not None:
        tests = [*binding["python"], *(f"{TS_FILE} > {title}" for title in binding["typescript"])]
    answer: dict[str, Any] = {
        "scenario_id": scenario_id,
        "passed": not diagnostic,
        "native_tests": tests,
    }
    if diagnostic:
        answer["diagnostic"] = diagnostic
    json.dump(answer, sys.stdout)
    sys.stdout.write("\n")


def main() -> int:
    scenario_id = sys.argv[-1]
    given = json.load(sys.stdin)
    scenarios = {s["id"]: s for s in json.loads(BINDINGS.read_text())["scenarios"]}
    binding = scenarios.get(scenario_id)
    if binding is None:
        result(scenario_id, None, f"Earmark binds no test to {scenario_id}")
        return 0
    bound = {field: binding[field] for field in INPUTS}
    if given != bound:
        result(scenario_id, binding, f"the catalog's {scenario_id} is not the one bound: {given}")
        return 0
    node_ids = [*binding["python"], f"{MODULE}::test_typescript_scenario[{scenario_id}]"]
    print(f"{scenario_id}: pytest {' '.join(node_ids)}", file=sys.stderr, flush=True)
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rxX",
            "-p",
            "no:cacheprovider",
            "-m",
            "",
            *node_ids,
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr,
        check=False,
    )
    if ran.returncode != 0:
        result(scenario_id, binding, f"its tests failed (pytest exited {ran.returncode})")
    elif binding["status"] not in MET:
        why = binding.get("why", "")
        result(scenario_id, binding, f"{binding['status']}: {why}".rstrip(": "))
    else:
        result(scenario_id, binding)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
