#!/usr/bin/env bash
# Compiles the generated stubs (gen/) and Worker.java into out/ with plain javac, on the
# jars Debian's packages install (.ci/run installs them). `build.sh --classpath` prints the
# classpath, for the run command: java -cp "out:$(./build.sh --classpath)" Worker ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

# Listed one by one: Debian's netty-all.jar is an empty aggregator; its guava.jar carries
# failureaccess's class itself (there is no failureaccess.jar).
jars=(
  grpc-api grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub grpc-context
  protobuf guava perfmark-api error_prone_annotations jsr305
  geronimo-annotation-1.3-spec
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-common netty-handler
  netty-resolver netty-transport
)
classpath=""
for jar in "${jars[@]}"; do
  path="/usr/share/java/$jar.jar"
  if [[ ! -f "$path" ]]; then
    echo "build.sh: $path is missing (Debian's libgrpc-java, libprotobuf-java," \
      "libnetty-java, libguava-java, libperfmark-java, liberror-prone-java, libjsr305-java" \
      "and libgeronimo-annotation-1.3-spec-java install the jars)" >&2
    exit 1
  fi
  classpath="${classpath:+$classpath:}$path"
done

if [[ "${1:-}" == "--classpath" ]]; then
  echo "$classpath"
  exit 0
fi

if ! command -v javac >/dev/null; then
  echo "build.sh: javac is missing (Debian's default-jdk-headless)" >&2
  exit 1
fi
rm -rf "$here/out"
mkdir -p "$here/out"
find "$here/gen" -name '*.java' -print0 | xargs -0 javac -nowarn -encoding UTF-8 \
  -d "$here/out" -cp "$classpath" "$here/Worker.java"
