#!/usr/bin/env bash
# Host prerequisites for mtguard-rt, idempotent: each step checks before it acts, so a second
# run costs a few seconds. Needs root. Installs Debian packages, links kernel headers for bcc,
# mounts tracefs/debugfs and starts dockerd (no bridge, no iptables: this host must not route).
set -euo pipefail
log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (eBPF and Docker need it): sudo make ${MAKE_TARGET:-test}"

pkgs=(docker.io python3-bpfcc bpfcc-tools linux-headers-amd64 iproute2 chromium chromium-headless-shell git
      prometheus prometheus-alertmanager rsyslog systemd)  # alert/metrics tests start their own daemons
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# bcc compiles against /lib/modules/$(uname -r)/build. This kernel ships none; Debian's
# newest headers are older, which is fine as long as the BPF C never reads kernel structs.
kver=$(uname -r)
if [ ! -e "/lib/modules/$kver/build" ]; then
  amd=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1)
  [ -n "$amd" ] || die "no /usr/src/linux-headers-*-amd64 after installing linux-headers-amd64"
  common=${amd%-amd64}-common
  log "linking kernel headers $amd for $kver"
  mkdir -p "/lib/modules/$kver"
  ln -sfn "$amd" "/lib/modules/$kver/build"
  ln -sfn "$common" "/lib/modules/$kver/source"
fi

mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
if [ ! -e /sys/kernel/tracing/events ]; then
  mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || die "cannot mount tracefs at /sys/kernel/tracing"
fi

if ! docker version >/dev/null 2>&1; then
  dockerd_bin=$(command -v dockerd || true)
  [ -n "$dockerd_bin" ] || die "dockerd not found after installing docker.io"
  log "starting dockerd (--bridge=none --iptables=false --ip6tables=false)"
  mkdir -p /var/log
  # its own session: a daemon must not die with the process group of whoever ran this
  # script (a terminal closed, a CI step or tool job ended and its group killed)
  setsid nohup "$dockerd_bin" --bridge=none --iptables=false --ip6tables=false \
    >>/var/log/mtguard-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    docker version >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker version >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see /var/log/mtguard-dockerd.log"
fi
log "host ready: kernel $kver, docker $(docker version -f '{{.Server.Version}}')"
