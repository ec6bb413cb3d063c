#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine: kwsniff with its test extras (pip), and
# tcpdump (Debian) for the tests that capture real traffic against a real broker on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e ".[test]"
if ! command -v tcpdump >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq tcpdump >/dev/null
fi
