#!/usr/bin/env bash
# Installs, from Debian's packages (Debian 12 or 13), what the machine lacks. `--run`: what `make run`
# needs, python3-venv (the virtual environment), Java 17 or later (Spark and the embedded broker run
# on it) and Maven (fetches the embedded Kafka broker's jars). Without it, also what the test suite
# needs: Chromium and ChromeDriver (dashboard tests), the PostgreSQL server programs (the PostgreSQL
# sink tests start their own server), tcpdump (scapy compiles `produce capture --bpf` filters with it),
# Prometheus and promtool (the alerting-rule tests run promtool and start their own Prometheus; the
# package's service is not needed). Needs root or sudo when something is missing.
set -euo pipefail
missing=()
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
# Java 17 or later: JAVA_HOME's, else the PATH's; default-jre-headless is 17 on Debian 12, 21 on 13
java_major() {
  "${JAVA_HOME:+$JAVA_HOME/bin/}java" -version 2>&1 |
    sed -n 's/.*version "\([0-9]*\)\.\{0,1\}\([0-9]*\).*/\1 \2/p' | head -1 |
    { read -r major minor; [ "$major" = 1 ] && echo "$minor" || echo "${major:-0}"; }
}
[ "$(java_major 2>/dev/null || echo 0)" -ge 17 ] 2>/dev/null || missing+=(default-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
if [ "${1:-}" != --run ]; then
  command -v chromium >/dev/null || missing+=(chromium)
  command -v chromedriver >/dev/null || missing+=(chromium-driver)
  command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
  command -v tcpdump >/dev/null || missing+=(tcpdump)
  command -v promtool >/dev/null || missing+=(prometheus)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing from Debian's packages: ${missing[*]}" >&2
apt() {
  if [ "$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get "$@"
  else sudo DEBIAN_FRONTEND=noninteractive apt-get "$@"; fi
}
# a stale package list makes the install fail: refresh it and try once more
apt install -y -q "${missing[@]}" >/dev/null || { apt update -q >/dev/null && apt install -y -q "${missing[@]}" >/dev/null; }
