"""The checked-in generated code of every language is exactly what buf.gen.yaml makes from
protos/ (`make generate`: tools/protogen.py runs `buf generate`, then copies the .proto files
beside the Python code): one generation into a temporary folder, then one test a language
that compares its folder file by file, byte for byte, with no file more or less.

Every generator must be on the machine (.ci/run and `make test` install them): a missing one
fails the tests with its name, rather than letting the code drift unchecked."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOGEN = ROOT / "tools" / "protogen.py"
# One worker generates once for the module's tests.
pytestmark = pytest.mark.xdist_group("generated")

# Each language's folder of generated code, and what buf.gen.yaml runs for it: a program on
# PATH (a bare name) or a path in the checkout, and what installs it.
FOLDERS = {
    "python": "src/earmark/v1",
    "typescript": "clients/typescript/src/gen",
    "go": "clients/go/earmark/v1",
    "java": "examples/java-worker/gen",
}
GENERATORS = {
    "python": [(".venv/bin/python", "`make venv` (grpcio-tools 1.85.1's protoc)")],
    "typescript": [
        ("clients/typescript/node_modules/.bin/protoc-gen-ts_proto", "`make typescript`"),
        ("node", "Node.js"),
    ],
    "go": [
        ("protoc-gen-go", "Debian's protoc-gen-go"),
        ("protoc-gen-go-grpc", "Debian's protoc-gen-go-grpc"),
    ],
    "java": [
        ("protoc", "Debian's protobuf-compiler"),
        ("grpc_java_plugin", "Debian's protobuf-compiler-grpc-java-plugin"),
    ],
}
BUF = ("tools/buf/node_modules/.bin/buf", "`make buf-tools`")


def missing(language: str | None) -> list[str]:
    """The generators buf.gen.yaml runs for language (None: buf itself) that are not here."""
    found = []
    for name, source in GENERATORS[language] if language else [BUF]:
        present = (ROOT / name).exists() if "/" in name else shutil.which(name) is not None
        if not present:
            found.append(f"{name} is missing ({source} installs it)")
    if language == "python" and importlib.util.find_spec("grpc_tools") is None:
        found.append("grpc_tools is missing from .venv (`make venv` installs grpcio-tools)")
    return found


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path | str:
    """The folder tools/protogen.py generated everything into, or why it could not."""
    why = [m for language in (None, *GENERATORS) for m in missing(language)]
    if why:
        return "buf generate runs every language's generators: " + "; ".join(why)
    out = tmp_path_factory.mktemp("generated")
    result = subprocess.run(
        [sys.executable, str(PROTOGEN), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        return f"tools/protogen.py --out failed:\n{result.stdout}{result.stderr}"
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def assert_generated(language: str, generated: Path | str) -> None:
    """Fails naming language's missing generators, else compares its folder with out's."""
    why = missing(None) + missing(language)
    if why:
        pytest.fail("; ".join(why))
    if isinstance(generated, str):
        pytest.fail(generated)
    folder = FOLDERS[language]
    made = _files(generated / folder)
    kept = _files(ROOT / folder)
    assert made, f"buf.gen.yaml generated nothing into {folder}"
    assert sorted(made) == sorted(kept), f"{folder} differs in its files: run `make generate`"
    drifted = sorted(name for name, content in made.items() if content != kept[name])
    assert not drifted, f"{folder}: {drifted} drifted from protos/: run `make generate`"


def test_python_code_matches_protos(generated: Path | str) -> None:
    """src/earmark/v1 is byte for byte grpcio-tools' Python, .pyi and gRPC Python code with
    tools/protogen.py's .proto copies and __init__.py."""
    assert_generated("python", generated)


def test_typescript_code_matches_protos(generated: Path | str) -> None:
    """clients/typescript/src/gen is byte for byte ts-proto's code, with buf.gen.yaml's
    options."""
    assert_generated("typescript", generated)


def test_go_code_matches_protos(generated: Path | str) -> None:
    """clients/go/earmark/v1 is byte for byte protoc-gen-go's and protoc-gen-go-grpc's code."""
    assert_generated("go", generated)


def test_java_code_matches_protos(generated: Path | str) -> None:
    """examples/java-worker/gen is byte for byte protoc's Java and grpc_java_plugin's code."""
    assert_generated("java", generated)
