#!/usr/bin/env bash
# Installs gpuprofd from this directory (made by `cargo xtask dist`) as a systemd service.
#   sudo ./install.sh                      # /usr/local/bin, /etc/gpuprofd, /etc/systemd/system
#   sudo ./install.sh --prefix /opt/gpuprofd
#   DESTDIR=/tmp/root ./install.sh         # stage into a directory (packaging); no systemctl
#   sudo ./install.sh --least-privilege auto|yes|no
# An existing /etc/gpuprofd/config.toml is kept; the default is installed beside it as
# config.toml.default. Then: systemctl enable --now gpuprofd
# --least-privilege: the service without CAP_SYS_ADMIN (gpuprofd.service.d/least-privilege.conf),
# which kernels with uprobe_multi links (Linux 6.6+) allow. auto (the default): installed when
# gpuprofd's probe round trip passes on this node without CAP_SYS_ADMIN, removed when it fails;
# with DESTDIR, not installed (the target node is not this one): say yes or no.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=/usr/local
least=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --least-privilege)
      case "${2:-}" in
        auto|yes|no) least=$2; shift 2 ;;
        *) echo "install.sh: --least-privilege takes auto, yes or no, not \"${2:-}\"" >&2; exit 2 ;;
      esac ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument \"$1\" (see --help)" >&2; exit 2 ;;
  esac
done
dest=${DESTDIR:-}
if [ -z "$dest" ] && [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (sudo ./install.sh), or set DESTDIR to stage the files" >&2
  exit 1
fi
bindir=$prefix/bin
install -d "$dest$bindir" "$dest/etc/gpuprofd" "$dest/etc/systemd/system" "$dest$prefix/share/doc/gpuprofd/docs"
install -m 0755 "$here/bin/gpuprofd" "$dest$bindir/gpuprofd"
# The injection library (docs/INJECTION.md), where CUDA_INJECTION64_PATH can name it.
install -D -m 0644 "$here/lib/libgpuprofd_inject.so" "$dest$prefix/lib/gpuprofd/libgpuprofd_inject.so"
sed -e "s|@BINDIR@|$bindir|g" -e "s|@DOCDIR@|$prefix/share/doc/gpuprofd|g" "$here/gpuprofd.service" > "$dest/etc/systemd/system/gpuprofd.service"
install -m 0644 "$here/gpuprofd.socket" "$dest/etc/systemd/system/gpuprofd.socket"
install -m 0644 "$here/gpuprofd-metrics.socket" "$dest/etc/systemd/system/gpuprofd-metrics.socket"
chmod 0644 "$dest/etc/systemd/system/gpuprofd.service"
if [ -e "$dest/etc/gpuprofd/config.toml" ]; then
  install -m 0644 "$here/config.toml" "$dest/etc/gpuprofd/config.toml.default"
  echo "install.sh: kept the existing /etc/gpuprofd/config.toml (the default is config.toml.default)"
else
  install -m 0644 "$here/config.toml" "$dest/etc/gpuprofd/config.toml"
fi
install -m 0644 "$here/README.md" "$dest$prefix/share/doc/gpuprofd/README.md"
install -D -m 0644 "$here/gpuprofd.1" "$dest$prefix/share/man/man1/gpuprofd.1"
# The README links into docs/: the same tree beside it.
install -m 0644 "$here"/docs/*.md "$dest$prefix/share/doc/gpuprofd/docs/"

# The capabilities the unit keeps, less CAP_SYS_ADMIN: what the drop-in leaves the service.
dropin_dir=$dest/etc/systemd/system/gpuprofd.service.d
dropin=$dropin_dir/least-privilege.conf
small=$(sed -n 's/^CapabilityBoundingSet=\(CAP_.*\)$/\1/p' "$here/least-privilege.conf" |
  tr ' ' '\n' | sed 's/^CAP_/+/' | tr 'A-Z' 'a-z' | paste -sd, -)
why=""
if [ "$least" = auto ]; then
  # (GPUPROFD_CHECK_UNDER_DESTDIR=1: check this machine anyway; the test suite's way in.)
  if [ -n "$dest" ] && [ "${GPUPROFD_CHECK_UNDER_DESTDIR:-}" != 1 ]; then
    least=no
    why="staged under DESTDIR, so not checked on the target node (--least-privilege yes installs it)"
  elif ! command -v setpriv >/dev/null; then
    least=no
    why="setpriv (util-linux) is missing, so it could not be checked"
  else
    # doctor under the drop-in's set: its probe round trip must pass through a uprobe_multi
    # link, and /proc/PID/map_files must be followable.
    doctor=$(setpriv --bounding-set=-all,"$small" --inh-caps=-all --no-new-privs -- \
      "$here/bin/gpuprofd" doctor --no-system-libs 2>&1) || true
    round=$(printf '%s\n' "$doctor" | grep -m1 '^ok   bpf_round_trip.*uprobe_multi link' || true)
    maps=$(printf '%s\n' "$doctor" | grep -m1 '^ok   process_maps' || true)
    if [ -n "$round" ] && [ -n "$maps" ]; then
      least=yes
      why="gpuprofd's probes attach without CAP_SYS_ADMIN here: ${round#ok   bpf_round_trip  }"
    else
      least=no
      failed=$(printf '%s\n' "$doctor" | grep -m1 -E '^(FAIL|warn) +(bpf_round_trip|process_maps) ' || true)
      why="gpuprofd doctor without CAP_SYS_ADMIN: ${failed:-its probe round trip went through no uprobe_multi link: ${doctor:-no output}}"
    fi
  fi
fi
if [ "$least" = yes ]; then
  install -d "$dropin_dir"
  install -m 0644 "$here/least-privilege.conf" "$dropin"
  echo "install.sh: least privilege: the service runs without CAP_SYS_ADMIN (${dropin#"$dest"})${why:+; $why}"
else
  if [ -e "$dropin" ]; then
    rm -f "$dropin"
    rmdir "$dropin_dir" 2>/dev/null || true
    echo "install.sh: removed ${dropin#"$dest"}"
  fi
  echo "install.sh: the service keeps CAP_SYS_ADMIN${why:+: $why}"
fi
if [ -z "$dest" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  echo "install.sh: installed; start it with: systemctl enable --now gpuprofd"
else
  echo "install.sh: installed under ${dest:-/}"
fi
