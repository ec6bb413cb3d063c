#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine: kwsniff with its test extras (pip), and from
# Debian: tcpdump (the tests capture real traffic against a real broker on loopback) and openssl (the
# TLS test makes a self-signed certificate). tshark is not needed: its view is stored as test data.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e ".[test]"
missing=()
command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
