#!/usr/bin/env bash
# `edgefl client` talks (ctest cli.client.talks): what a device prints when
#   1. its server cannot be reached: every connection attempt, its failure and the backoff before
#      the next, then "no round accepted in ..." and exit status 4 at --give-up-after;
#   2. its round closes while it trains: the round line says the update was discarded and why
#      (straggler), the device backs off and is counted in the next round.
#
#   client_cli_test.sh EDGEFL_CLI EDGEFL_SERVER WORK_DIR
set -euo pipefail
cli=$1 server=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
"$cli" certs --out "$work/pki" --devices 2 >/dev/null
pki=$work/pki
device() {  # N: the options naming device N's credentials
  local id
  id=$(printf 'device-%04d' "$1")
  echo --ca "$pki/ca.crt" --cert "$pki/devices/$id.crt" --key "$pki/devices/$id.key"
}
fail() {
  echo "client_cli_test: $*" >&2
  for f in "$work"/*.out "$work"/*.err; do echo "--- $f"; tail -n 20 "$f"; done >&2
  exit 1
}
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

# 1. Nobody listens on a port the kernel just handed out and took back.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
status=0
# shellcheck disable=SC2046
"$cli" client --server "127.0.0.1:$port" $(device 1) --shard 0/100 --rounds 1 --give-up-after 2 \
  >"$work/unreachable.out" 2>"$work/unreachable.err" || status=$?
[[ $status -eq 4 ]] || fail "unreachable server: exit status $status, not 4"
grep -q "connecting to 127.0.0.1:$port (attempt 1 of" "$work/unreachable.err" || fail "no connection attempt shown"
grep -q "connect failed: cannot connect to 127.0.0.1:$port" "$work/unreachable.err" || fail "no failure shown"
grep -q "ms before trying again" "$work/unreachable.err" || fail "no backoff shown"
grep -q "no round accepted in 2000 ms; last: cannot connect" "$work/unreachable.err" || fail "no give-up reason"
echo "--- a device whose server cannot be reached (exit status $status):"
cat "$work/unreachable.err"

# 2. Cohort 1, two offers: the slow device trains while the fast one closes the round. The slow
#    device trains twice on 30,000 samples (3 epochs each: 0.4 s in a release build, about 30 s under
#    ASan on a slow machine), so its give-up time leaves room for both rounds.
"$server" --state-dir "$work/state" --ca "$pki/ca.crt" --cert "$pki/server.crt" --key "$pki/server.key" \
  --listen 127.0.0.1:0 --port-file "$work/ports" --model mlp:784-16-10 --rounds 2 --cohort 1 \
  --over-selection 2 --epochs 3 --update-norm-factor 100 --retry-after 100 --retry-window 100 --drain 500 \
  >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [[ -s $work/ports ]] && break; sleep 0.1; done
read -r port _ <"$work/ports"
# shellcheck disable=SC2046
"$cli" client --server "127.0.0.1:$port" $(device 2) --partition iid --shard 0/2 --rounds 1 --give-up-after 240 \
  >"$work/slow.out" 2>"$work/slow.err" &
slow=$!
pids+=("$slow")
for _ in $(seq 300); do
  grep -q "training model v1" "$work/slow.err" 2>/dev/null && break
  sleep 0.1
done
grep -q "training model v1" "$work/slow.err" || fail "the slow device never started training"
# The slow device is stopped while it trains (no connection is open then), so the fast one closes
# the round first whatever the machine's load.
kill -STOP "$slow"
# shellcheck disable=SC2046
"$cli" client --server "127.0.0.1:$port" $(device 1) --shard 0/100 --rounds 1 --give-up-after 240 \
  >"$work/fast.out" 2>"$work/fast.err" || { kill -CONT "$slow"; fail "the fast device failed"; }
kill -CONT "$slow"
wait "$slow" || fail "the slow device failed"
grep -q "round 1 (model v1): straggler: the update (.*) was discarded: the round closed with its quorum while this device trained" \
  "$work/slow.out" || fail "the straggler was not reported"
grep -q "round 2 (model v2): accepted" "$work/slow.out" || fail "the straggler was not counted in the next round"
grep -q "round 1 ended before its update was uploaded (closed while this device trained): the update is discarded" \
  "$work/slow.err" || fail "the discarded update was not logged"
grep -q "the update was not counted: straggler; backing off" "$work/slow.err" || fail "no backoff after the straggler"
echo "--- a device whose round closed while it trained:"
cat "$work/slow.err" "$work/slow.out"
