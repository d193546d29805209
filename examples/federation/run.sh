#!/usr/bin/env bash
# The main job: a federated training run of Fashion-MNIST on loopback, over mutual TLS.
#
#   bash examples/federation/run.sh            # after `cmake --workflow --preset build`
#
# Makes a development PKI (edgefl certs), starts edgefl-server, starts DEVICES client processes
# (each a device with its own certificate and its own shard of the training set), runs ROUNDS
# rounds with the server's default codec, shows one line per round (test accuracy, bytes up and
# down, time) and ends with the summary against bf16 both ways. Nothing is left running: every
# process is stopped on exit, whatever happens.
#
# Settings (environment): DEVICES (8), COHORT (4), ROUNDS (30), CODEC (sparq:0.1), MODEL (cnn),
# SHARDS (100: each device trains on 1/SHARDS of the data, Dirichlet 0.5 label skew),
# BUILD (build/release), WORK (build/federation: PKI, server state, logs), SERVER_ARGS (more
# edgefl-server options, e.g. a private run: CODEC='q4:shared=0.01,clip'
# SERVER_ARGS='--secure-aggregation on').
set -euo pipefail
cd "$(dirname "$0")/../.."

DEVICES=${DEVICES:-8}
COHORT=${COHORT:-4}
ROUNDS=${ROUNDS:-30}
CODEC=${CODEC:-sparq:0.1}
MODEL=${MODEL:-cnn}
SHARDS=${SHARDS:-100}
BUILD=${BUILD:-build/release}
WORK=${WORK:-build/federation}
read -r -a server_args <<<"${SERVER_ARGS:-}"
edgefl=$BUILD/sdk/cli/edgefl
server=$BUILD/server/edgefl-server
for binary in "$edgefl" "$server"; do
  [[ -x $binary ]] || { echo "run.sh: $binary is missing: build first (cmake --workflow --preset build)" >&2; exit 2; }
done

rm -rf "$WORK"
mkdir -p "$WORK/logs"
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  exit "$status"
}
trap cleanup EXIT INT TERM

echo "== development PKI: a CA, the server, $DEVICES devices (ECDSA P-256) in $WORK/pki"
"$edgefl" certs --out "$WORK/pki" --devices "$DEVICES" >/dev/null

echo "== edgefl-server: $ROUNDS rounds of $COHORT devices, model $MODEL, uplink codec $CODEC"
"$server" --state-dir "$WORK/state" --ca "$WORK/pki/ca.crt" --cert "$WORK/pki/server.crt" \
  --key "$WORK/pki/server.key" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --port-file "$WORK/ports" \
  --model "$MODEL" --codec "$CODEC" --rounds "$ROUNDS" --cohort "$COHORT" --over-selection 1.25 --selection-probability 0.5 \
  --deadline 120 --retry-after 300 --retry-window 700 --eval --progress \
  --drain 5000 --summary "$WORK/summary.jsonl" "${server_args[@]}" 2>"$WORK/logs/server.log" &
server_pid=$!
pids+=("$server_pid")
for _ in $(seq 1 200); do
  [[ -s $WORK/ports ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$WORK/logs/server.log" >&2; exit 1; }
  sleep 0.1
done
read -r port metrics_port <"$WORK/ports"
echo "   listening on 127.0.0.1:$port (mTLS); metrics on http://127.0.0.1:$metrics_port/metrics"

echo "== $DEVICES devices, each with its own certificate and shard"
for i in $(seq 1 "$DEVICES"); do
  id=$(printf 'device-%04d' "$i")
  "$edgefl" client --server "127.0.0.1:$port" --ca "$WORK/pki/ca.crt" \
    --cert "$WORK/pki/devices/$id.crt" --key "$WORK/pki/devices/$id.key" \
    --shard "$((i - 1))/$SHARDS" --partition dirichlet:0.5 >"$WORK/logs/$id.log" 2>&1 &
  pids+=("$!")
done

# The server prints one line per round and the summary on stdout; it exits after the last round
# (answering "draining" for a few seconds first, so that devices stop on their own).
status=0
wait "$server_pid" || status=$?
sleep 1
for pid in "${pids[@]:1}"; do kill "$pid" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
echo
for i in $(seq 1 "$DEVICES"); do
  id=$(printf 'device-%04d' "$i")
  rounds=$(grep -c ': accepted;' "$WORK/logs/$id.log" || true)
  last=$(tail -1 "$WORK/logs/$id.log")
  echo "$id: $rounds rounds accepted; last: ${last:0:110}"
done
accepted=$(grep -c -E 'event=(update_accepted|masked_vector_accepted)' "$WORK/logs/server.log" || true)
refused=$(grep -c -E 'event=(tls_handshake_failed|device_refused)' "$WORK/logs/server.log" || true)
echo "$accepted updates accepted over mTLS, $refused connections refused; logs in $WORK/logs," \
     "global model in $WORK/state/global.safetensors"
exit "$status"
