#!/usr/bin/env bash
# tests/server/crash_soak.sh [SECONDS]: the e2e crash test at release length (default 600 s; CI
# runs it for 20 s): devices run edgefl::Client::participate() while edgefl-server is killed with
# SIGKILL at random moments and restarted on the same port. Passes when no device gave up, the
# acks the devices saw equal the ledger's rows, and every committed model is its predecessor plus
# the FedAvg of its round's ledger. Needs build/release (cmake --workflow --preset build).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-600}"
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: tests/server/crash_soak.sh [SECONDS]" >&2; exit 2; }
EDGEFL_CRASH_SECONDS="$seconds" exec build/release/tests/edgefl_e2e_tests --no-intro=true \
  --test-case='random kill -9 of the server while devices participate*' 2> >(grep -v '^ts=' >&2)
