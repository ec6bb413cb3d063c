#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine: kwsniff with its test extras (pip), and from
# Debian: tcpdump (the tests capture real traffic against a real broker on loopback), openssl (the
# TLS test makes a self-signed certificate), and redis-server, memcached and postgresql (servers of
# other protocols whose traffic must never be taken for Kafka), and a Java 17 JDK for PySpark's
# local Spark (the `kwsniff spark`/`report` tests) and for compiling tests/java/. tshark is not needed: its view is
# stored as test data.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e ".[test,spark]"
missing=()
command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v memcached >/dev/null 2>&1 || missing+=(memcached)
# PySpark 4 runs on Java 17 or newer: an older java on PATH counts as missing. javac compiles the
# Kafka-client encoder of tests/test_protocol_oracle_java.py.
java_major() { java -version 2>&1 | sed -n '1s/.*version "\([0-9]*\)[."].*/\1/p'; }
{ command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; } || missing+=(openjdk-17-jdk-headless)
{ command -v psql >/dev/null 2>&1 && compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; } || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! { command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; }; then
  echo "install-test-deps: error: Java 17 or newer is needed (PySpark 4); java -version says: $(java -version 2>&1 | head -1)" >&2
  exit 1
fi
