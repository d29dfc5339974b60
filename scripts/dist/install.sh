#!/usr/bin/env bash
# Installs gpuprofd from this directory (made by `cargo xtask dist`) as a systemd service.
#   sudo ./install.sh                      # /usr/local/bin, /etc/gpuprofd, /etc/systemd/system
#   sudo ./install.sh --prefix /opt/gpuprofd
#   DESTDIR=/tmp/root ./install.sh         # stage into a directory (packaging); no systemctl
# An existing /etc/gpuprofd/config.toml is kept; the default is installed beside it as
# config.toml.default. Then: systemctl enable --now gpuprofd
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=/usr/local
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument \"$1\" (see --help)" >&2; exit 2 ;;
  esac
done
dest=${DESTDIR:-}
if [ -z "$dest" ] && [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (sudo ./install.sh), or set DESTDIR to stage the files" >&2
  exit 1
fi
bindir=$prefix/bin
install -d "$dest$bindir" "$dest/etc/gpuprofd" "$dest/etc/systemd/system" "$dest$prefix/share/doc/gpuprofd"
install -m 0755 "$here/bin/gpuprofd" "$dest$bindir/gpuprofd"
sed -e "s|@BINDIR@|$bindir|g" -e "s|@DOCDIR@|$prefix/share/doc/gpuprofd|g" "$here/gpuprofd.service" > "$dest/etc/systemd/system/gpuprofd.service"
install -m 0644 "$here/gpuprofd.socket" "$dest/etc/systemd/system/gpuprofd.socket"
chmod 0644 "$dest/etc/systemd/system/gpuprofd.service"
if [ -e "$dest/etc/gpuprofd/config.toml" ]; then
  install -m 0644 "$here/config.toml" "$dest/etc/gpuprofd/config.toml.default"
  echo "install.sh: kept the existing /etc/gpuprofd/config.toml (the default is config.toml.default)"
else
  install -m 0644 "$here/config.toml" "$dest/etc/gpuprofd/config.toml"
fi
install -m 0644 "$here/README.md" "$dest$prefix/share/doc/gpuprofd/README.md"
if [ -z "$dest" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  echo "install.sh: installed; start it with: systemctl enable --now gpuprofd"
else
  echo "install.sh: installed under ${dest:-/}"
fi
