#!/usr/bin/env bash
# Installs, from Debian's packages, what the test suite needs and the machine lacks:
# Chromium and ChromeDriver (dashboard tests), the PostgreSQL server programs (the PostgreSQL sink
# tests start their own server), Maven (fetches the embedded Kafka broker's jars), tcpdump (scapy compiles
# `produce capture --bpf` filters with it), Prometheus and promtool (the alerting-rule tests run promtool and
# start their own Prometheus; the package's service is not needed). Needs root or sudo.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v mvn >/dev/null || missing+=(maven)
command -v tcpdump >/dev/null || missing+=(tcpdump)
command -v promtool >/dev/null || missing+=(prometheus)
command -v java >/dev/null || [ -n "${JAVA_HOME:-}" ] || missing+=(openjdk-17-jre-headless)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing from Debian's packages: ${missing[*]}" >&2
apt() {
  if [ "$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get "$@"
  else sudo DEBIAN_FRONTEND=noninteractive apt-get "$@"; fi
}
# a stale package list makes the install fail: refresh it and try once more
apt install -y -q "${missing[@]}" >/dev/null || { apt update -q >/dev/null && apt install -y -q "${missing[@]}" >/dev/null; }
