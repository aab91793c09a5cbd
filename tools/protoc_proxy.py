"""How buf.gen.yaml runs protoc's generators (issue 46): Python, .pyi and gRPC Python by the
protoc that grpcio-tools ships (.venv), Java by Debian's protoc, TypeScript's ts-proto by
grpcio-tools' protoc too, so that their output is byte for byte what protoc alone made.

Two ways buf runs it, from the repository's root (`buf generate` there):

    protoc_path: [.venv/bin/python, tools/protoc_proxy.py, PROTOC]
        as protoc itself, for a `protoc_builtin` generator (python, pyi, java): buf passes
        `--descriptor_set_in=/dev/stdin --NAME_out=DIR [--NAME_opt=...] FILES`, or `--version`.

    local: [.venv/bin/python, tools/protoc_proxy.py, --plugin, PROTOC, NAME[=PLUGIN]]
        as a protoc plugin, for a generator buf does not know as a protoc built-in
        (grpc_python, which only grpcio-tools' protoc has) or one that must run under protoc
        (ts-proto, whose header names the protoc that ran it: PLUGIN is its executable).

PROTOC is `grpc_tools` (grpcio-tools' protoc, run in this process) or a protoc executable.

Either way the files reach protoc as a FileDescriptorSet, and buf's descriptors carry a
json_name on every field, where protoc's own parser records one only when the .proto sets
it: the descriptors that Python's and Java's code embed would then differ from protoc's.
So a json_name that is the default one (protoc's ToJsonName of the field's name) is dropped
before protoc reads them, as protoc would have had it (protos/ sets no json_name).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2


def default_json_name(name: str) -> str:
    """protoc's ToJsonName: underscores dropped, each letter after one upper-cased."""
    out: list[str] = []
    upper = False
    for char in name:
        if char == "_":
            upper = True
        elif upper:
            out.append(char.upper())
            upper = False
        else:
            out.append(char)
    return "".join(out)


def _messages(
    messages: Iterable[descriptor_pb2.DescriptorProto],
) -> Iterable[descriptor_pb2.DescriptorProto]:
    for message in messages:
        yield message
        yield from _messages(message.nested_type)


def as_protoc_parsed(files: descriptor_pb2.FileDescriptorSet) -> None:
    """Drops every json_name that is the default one, in place."""
    for file in files.file:
        fields = [*file.extension]
        for message in _messages(file.message_type):
            fields.extend(message.field)
            fields.extend(message.extension)
        for field in fields:
            if field.HasField("json_name") and field.json_name == default_json_name(field.name):
                field.ClearField("json_name")


def run_protoc(protoc: str, args: list[str]) -> int:
    """Runs protoc (`grpc_tools` or an executable) with args; its exit code."""
    if protoc == "grpc_tools":
        from grpc_tools import protoc as grpc_protoc  # type: ignore[import-untyped]

        sys.stdout.flush()
        return int(grpc_protoc.main(["grpc_tools.protoc", *args]))
    return subprocess.run([protoc, *args], check=False).returncode


def as_protoc(protoc: str, args: list[str]) -> int:
    """Runs protoc with args, its --descriptor_set_in rewritten by as_protoc_parsed."""
    flag = "--descriptor_set_in="
    given = [a for a in args if a.startswith(flag)]
    if not given:
        return run_protoc(protoc, args)
    (descriptor_set_in,) = given
    path = descriptor_set_in.removeprefix(flag)
    data = sys.stdin.buffer.read() if path in ("/dev/stdin", "-") else Path(path).read_bytes()
    files = descriptor_pb2.FileDescriptorSet.FromString(data)
    as_protoc_parsed(files)
    with tempfile.TemporaryDirectory(prefix="protoc-proxy-") as tmp:
        rewritten = Path(tmp) / "files.binpb"
        rewritten.write_bytes(files.SerializeToString())
        return run_protoc(protoc, [f"{flag}{rewritten}" if a in given else a for a in args])


def as_plugin(protoc: str, generator: str) -> int:
    """Answers buf's CodeGeneratorRequest on stdin by running generator under protoc."""
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    name, _, executable = generator.partition("=")
    files = descriptor_pb2.FileDescriptorSet(file=request.proto_file)
    as_protoc_parsed(files)
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    with tempfile.TemporaryDirectory(prefix="protoc-proxy-") as tmp:
        descriptors = Path(tmp) / "files.binpb"
        descriptors.write_bytes(files.SerializeToString())
        out = Path(tmp) / "out"
        out.mkdir()
        args = [f"--descriptor_set_in={descriptors}", f"--{name}_out={out}"]
        if executable:
            args.append(f"--plugin=protoc-gen-{name}={os.path.abspath(executable)}")
        if request.parameter:
            args.append(f"--{name}_opt={request.parameter}")
        # protoc's output goes to stderr: stdout carries the response to buf.
        stdout = os.dup(1)
        os.dup2(2, 1)
        try:
            code = run_protoc(protoc, [*args, *request.file_to_generate])
        finally:
            sys.stdout.flush()
            os.dup2(stdout, 1)
            os.close(stdout)
        if code != 0:
            response.error = f"protoc ({protoc}) exited with {code} running {name}"
        else:
            for path in sorted(p for p in out.rglob("*") if p.is_file()):
                response.file.add(
                    name=path.relative_to(out).as_posix(), content=path.read_text("utf-8")
                )
    sys.stdout.buffer.write(response.SerializeToString())
    sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--plugin"] and len(argv) == 3:
        return as_plugin(argv[1], argv[2])
    if not argv or argv[0].startswith("-"):
        raise SystemExit(f"usage: {__doc__}")
    return as_protoc(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
