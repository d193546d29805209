#!/usr/bin/env bash
# tests/server/load.sh DEVICES [ROUNDS] [COHORT]: the server's load table. edgefl-server with its
# default settings (the CNN, sparq:0.1, 1,024 connections, 64 KiB chunks, mutual TLS 1.3) on
# loopback, and DEVICES devices of `edgefl swarm` (threads of one process, each with its own
# certificate and TLS connections) that all want ROUNDS accepted rounds (default 10); the server
# runs ROUNDS rounds of COHORT updates (default 100), then drains. Every device must end without
# a failure (a device that gives up on a transient condition is a failure), and every round must
# commit. Prints one table row: server peak RSS (VmHWM), upload-to-ack p50 / p99, handshakes,
# ServerBusy answers, wall time. Needs build/release (cmake --workflow --preset build).
#
#   bash tests/server/load.sh 1000        # the README's load table: 1,000 and 3,000 devices
#   bash tests/server/load.sh 3000
#   EDGEFL_LOAD_SERVER_ARGS="--max-connections 256" bash tests/server/load.sh 1500   # past the cap
#   EDGEFL_LOAD_RAMP=100 EDGEFL_LOAD_SERVER_ARGS="--max-connections 10000" \
#     bash tests/server/load.sh 9999 5 1000                  # 9,999 devices arriving at 100 a second
#   EDGEFL_LOAD_POSTGRES=1 bash tests/server/load.sh 1000   # state in a private PostgreSQL cluster
#                                                            # (tests/support/postgres_cluster.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."

devices="${1:?usage: tests/server/load.sh DEVICES [ROUNDS] [COHORT]}"
rounds="${2:-10}"
cohort="${3:-100}"
bin=build/release
edgefl="$bin/sdk/cli/edgefl"
server_bin="$bin/server/edgefl-server"
[[ -x "$edgefl" && -x "$server_bin" ]] || { echo "load.sh: build first (cmake --workflow --preset build)" >&2; exit 2; }

# Each device holds a TLS connection, and so does the server for it: two descriptors per device.
ulimit -n "$(( devices * 4 + 4096 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d /tmp/edgefl-load-XXXXXX)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [[ -n "${EDGEFL_LOAD_POSTGRES:-}" ]]; then bash tests/support/postgres_cluster.sh stop "$work/pg"; fi
  if [[ -z "${EDGEFL_LOAD_KEEP:-}" ]]; then rm -rf "$work"; else echo "load.sh: kept $work"; fi
}
trap cleanup EXIT

"$edgefl" certs --out "$work/pki" --devices "$devices" >/dev/null
state_args=()
state_name=SQLite
if [[ -n "${EDGEFL_LOAD_POSTGRES:-}" ]]; then
  state_name=PostgreSQL
  chmod 755 "$work"  # the cluster runs as `postgres` under root
  bash tests/support/postgres_cluster.sh start "$work/pg"
  state_args=(--state "$(cat "$work/pg/url")/postgres")
fi
"$server_bin" "${state_args[@]}" --state-dir "$work/state" --ca "$work/pki/ca.crt" --cert "$work/pki/server.crt" \
  --key "$work/pki/server.key" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --port-file "$work/port" \
  --rounds "$rounds" --cohort "$cohort" --deadline 600 --drain 5000 ${EDGEFL_LOAD_SERVER_ARGS:-} \
  2>"$work/server.log" >"$work/server.out" &
server_pid=$!
for _ in $(seq 300); do [[ -s "$work/port" ]] && break; sleep 0.1; done
read -r port metrics_port <"$work/port"

# Resident memory over the run, sampled twice a second (VmRSS), besides the peak the server logs.
(
  while kill -0 "$server_pid" 2>/dev/null; do
    awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status" 2>/dev/null || true
    sleep 0.5
  done
) >"$work/rss.txt" &
sampler=$!

# A swarm process holds about four descriptors per device (socket, epoll, timers): the devices
# are split into processes of at most EDGEFL_LOAD_PER_SWARM (2,500), each under the file limit.
# EDGEFL_LOAD_RAMP=R: devices arrive at R a second in all (each process starts its share at
# R / processes a second); by default all start at once.
per_swarm=${EDGEFL_LOAD_PER_SWARM:-2500}
processes=$(( (devices + per_swarm - 1) / per_swarm ))
ramp_args=()
if [[ -n "${EDGEFL_LOAD_RAMP:-}" ]]; then
  ramp_args=(--ramp "$(awk "BEGIN {print $EDGEFL_LOAD_RAMP / $processes}")")
fi
start=$(date +%s.%N)
swarm_status=0
swarm_pids=()
for ((first = 1; first <= devices; first += per_swarm)); do
  n=$((devices - first + 1 < per_swarm ? devices - first + 1 : per_swarm))
  "$edgefl" swarm --pki "$work/pki" --devices "$n" --first "$first" --server "127.0.0.1:$port" \
    --rounds "$rounds" "${ramp_args[@]}" >"$work/swarm-$first.txt" 2>"$work/swarm-$first.err" &
  swarm_pids+=($!)
done
for pid in "${swarm_pids[@]}"; do wait "$pid" || swarm_status=$?; done
end=$(date +%s.%N)
cat "$work"/swarm-*.txt >"$work/swarm.txt"
cat "$work"/swarm-*.err >"$work/swarm.err"
wait "$server_pid" || true
server_pid=""
wait "$sampler" 2>/dev/null || true

stopped=$(grep 'event=stopped' "$work/server.log" | tail -1)
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$stopped"; }
committed=$(field rounds_committed)
accepted=$(field updates_accepted)
peak_kb=$(field peak_rss_kb)
p50=$(field p50_upload_to_ack_s)
p99=$(field p99_upload_to_ack_s)
handshakes=$(field handshakes)
busy=$(grep -c 'event=connection_limit' "$work/server.log" || true)
busy_answers=$(field server_busy)
failed_handshakes=$(grep -c 'event=tls_handshake_failed' "$work/server.log" || true)
ledger_ms=$(field ledger_write_ms_mean)

echo "swarm: $(cat "$work/swarm.txt")"
if [[ -s "$work/swarm.err" ]]; then echo "swarm failures (first 10):"; head -10 "$work/swarm.err"; fi
printf '| devices | state | rounds committed | updates accepted | ledger write per update | server peak RSS | p50 / p99 upload-to-ack | handshakes (failed) | ServerBusy answers | sockets closed at the cap | wall |\n'
printf '| %s | %s | %s of %s | %s | %.2f ms | %.1f MiB | %.3f / %.3f s | %s (%s) | %s | %s | %.0f s |\n' \
  "$devices" "$state_name" "$committed" "$rounds" "$accepted" "$ledger_ms" \
  "$(awk "BEGIN {print $peak_kb / 1024}")" "$p50" "$p99" \
  "$handshakes" "$failed_handshakes" "$busy_answers" "$busy" "$(awk "BEGIN {print $end - $start}")"
if ((swarm_status != 0)) || [[ "$committed" != "$rounds" ]]; then
  echo "load.sh: FAILED (swarm exit $swarm_status, $committed of $rounds rounds committed)" >&2
  exit 1
fi
