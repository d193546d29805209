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
#   EDGEFL_LOAD_RAMP=40 EDGEFL_LOAD_SERVER_ARGS="--max-connections 10000" \
#     bash tests/server/load.sh 10000 5 1000                 # 10,000 devices arriving at 40 a second
#   EDGEFL_LOAD_POSTGRES=1 bash tests/server/load.sh 1000   # state in a private PostgreSQL cluster
#                                                            # (tests/support/postgres_cluster.sh)
#   EDGEFL_LOAD_AGGREGATORS=3 bash tests/server/load.sh 1000 # three aggregators on one PostgreSQL
#                                                            # database behind HAProxy (the devices
#                                                            # know only HAProxy's address)
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
  if [[ -n "$server_pid" ]]; then kill $server_pid 2>/dev/null || true; wait $server_pid 2>/dev/null || true; fi
  if [[ -n "${haproxy_pid:-}" ]]; then kill "$haproxy_pid" 2>/dev/null || true; fi
  if [[ -d "$work/pg" ]]; then bash tests/support/postgres_cluster.sh stop "$work/pg"; fi
  if [[ -z "${EDGEFL_LOAD_KEEP:-}" ]]; then rm -rf "$work"; else echo "load.sh: kept $work"; fi
}
trap cleanup EXIT

"$edgefl" certs --out "$work/pki" --devices "$devices" >/dev/null
aggregators=${EDGEFL_LOAD_AGGREGATORS:-1}
state_args=()
state_name=SQLite
if [[ -n "${EDGEFL_LOAD_POSTGRES:-}" ]] || ((aggregators > 1)); then
  state_name=PostgreSQL
  chmod 755 "$work"  # the cluster runs as `postgres` under root
  bash tests/support/postgres_cluster.sh start "$work/pg"
  state_args=(--state "$(cat "$work/pg/url")/postgres")
fi
# Several aggregators drain past a device's longest reconnect backoff (10 s): a device that
# lost its connection to one comes back through HAProxy to any.
drain_ms=5000
((aggregators > 1)) && drain_ms=12000
server_pids=()
backends=()
for ((a = 1; a <= aggregators; a++)); do
  aggregator_args=()
  ((aggregators > 1)) && aggregator_args=(--aggregator-id "agg$a")
  "$server_bin" "${state_args[@]}" "${aggregator_args[@]}" --state-dir "$work/state" --ca "$work/pki/ca.crt" \
    --cert "$work/pki/server.crt" --key "$work/pki/server.key" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
    --port-file "$work/port-$a" --rounds "$rounds" --cohort "$cohort" --deadline 600 --drain "$drain_ms" \
    ${EDGEFL_LOAD_SERVER_ARGS:-} 2>"$work/server-$a.log" >"$work/server-$a.out" &
  server_pids+=($!)
  for _ in $(seq 300); do [[ -s "$work/port-$a" ]] && break; sleep 0.1; done
  read -r port metrics_port <"$work/port-$a"
  backends+=("127.0.0.1:$port/$metrics_port")
done
server_pid="${server_pids[*]}"
target="127.0.0.1:$port"
haproxy_pid=""
if ((aggregators > 1)); then
  # The devices know HAProxy's address only (TCP mode, mutual TLS through to the aggregators).
  front=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # Two descriptors per proxied connection, under this shell's file limit (HAProxy refuses to start
  # past it).
  maxconn=$((devices * 2 + 1000))
  fd_cap=$(( ($(ulimit -n) - 1000) / 2 ))
  ((maxconn > fd_cap)) && maxconn=$fd_cap
  EDGEFL_HAPROXY_MAXCONN=$maxconn bash platforms/haproxy/edgefl-haproxy.sh "127.0.0.1:$front" \
    "${backends[@]}" >"$work/haproxy.cfg"
  haproxy -db -f "$work/haproxy.cfg" >"$work/haproxy.out" 2>"$work/haproxy.err" &
  haproxy_pid=$!
  sleep 5  # two health checks: every aggregator UP
  target="127.0.0.1:$front"
fi

# Resident memory over the run, sampled twice a second (VmRSS) for every aggregator, besides the
# peak each one logs.
(
  while kill -0 ${server_pids[0]} 2>/dev/null; do
    for pid in "${server_pids[@]}"; do awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true; done
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
  "$edgefl" swarm --pki "$work/pki" --devices "$n" --first "$first" --server "$target" \
    --rounds "$rounds" "${ramp_args[@]}" >"$work/swarm-$first.txt" 2>"$work/swarm-$first.err" &
  swarm_pids+=($!)
done
for pid in "${swarm_pids[@]}"; do wait "$pid" || swarm_status=$?; done
end=$(date +%s.%N)
cat "$work"/swarm-*.txt >"$work/swarm.txt"
cat "$work"/swarm-*.err >"$work/swarm.err"
for pid in "${server_pids[@]}"; do wait "$pid" || true; done
server_pid=""
[[ -n $haproxy_pid ]] && kill "$haproxy_pid" 2>/dev/null
wait "$sampler" 2>/dev/null || true

# Per aggregator: its `stopped` line. Rounds are the coordinators' (one at a time); updates,
# handshakes and ledger writes add up; RSS and latencies are each aggregator's.
committed=0 accepted=0 handshakes=0 busy_answers=0 ledger_sum=0 writes=0 peak="" latency="" open_peak=""
for ((a = 1; a <= aggregators; a++)); do
  stopped=$(grep 'event=stopped' "$work/server-$a.log" | tail -1)
  field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$stopped"; }
  committed=$((committed + $(field rounds_committed)))
  n=$(field updates_accepted)
  accepted=$((accepted + n))
  handshakes=$((handshakes + $(field handshakes)))
  busy_answers=$((busy_answers + $(field server_busy)))
  ledger_sum=$(awk "BEGIN {print $ledger_sum + $(field ledger_write_ms_mean) * $n}")
  writes=$((writes + n))
  open_peak+="${open_peak:+ / }$(field connections_peak)"
  peak+="${peak:+ / }$(awk "BEGIN {printf \"%.1f\", $(field peak_rss_kb) / 1024}")"
  latency+="${latency:+, }$(awk "BEGIN {printf \"%.0f / %.0f\", $(field p50_upload_to_ack_s) * 1000, \
    $(field p99_upload_to_ack_s) * 1000}")"
done
ledger_ms=$(awk "BEGIN {print ($writes > 0 ? $ledger_sum / $writes : 0)}")
# Devices present at once: those that had connected (a completed mutual-TLS handshake) by the
# time the last round committed; the rest arrived to hear that the server drains.
last_commit=$(cat "$work"/server-*.log | grep 'event=round_committed' | sed 's/^ts=\([^ ]*\).*/\1/' | sort | tail -1)
present=$(cat "$work"/server-*.log | grep 'event=device_connected' |
  awk -v last="ts=$last_commit" '$1 <= last { for (i = 2; i <= NF; i++) if ($i ~ /^device=/) seen[$i] = 1 }
    END { print length(seen) }')
busy=$(cat "$work"/server-*.log | grep -c 'event=connection_limit' || true)
failed_handshakes=$(cat "$work"/server-*.log | grep -c 'event=tls_handshake_failed' || true)
wall=$(awk "BEGIN {print $end - $start}")

echo "swarm: $(cat "$work/swarm.txt")"
if [[ -s "$work/swarm.err" ]]; then echo "swarm failures (first 10):"; head -10 "$work/swarm.err"; fi
printf '| devices (present at the last commit) | aggregators | state | rounds committed | updates accepted (per s) | ledger write per update | peak RSS per aggregator | p50 / p99 upload-to-ack per aggregator | handshakes per s (failed) | most connections at once per aggregator | ServerBusy answers | sockets closed at the cap | wall |\n'
printf '| %s (%s) | %s | %s | %s of %s | %s (%.0f) | %.2f ms | %s MiB | %s ms | %.0f (%s) | %s | %s | %s | %.0f s |\n' \
  "$devices" "$present" "$aggregators" "$state_name" "$committed" "$rounds" "$accepted" "$(awk "BEGIN {print $accepted / $wall}")" \
  "$ledger_ms" "$peak" "$latency" "$(awk "BEGIN {print $handshakes / $wall}")" "$failed_handshakes" \
  "$open_peak" "$busy_answers" "$busy" "$wall"
# Several aggregators: each round's close from its (first) seal to its commit, and what the
# coordinator merged: the partial sums the others flushed, or their updates decoded from the ledger.
closes=$(cat "$work"/server-*.log | grep -E 'event=(round_sealed|round_committed)' |
  awk '{ split(substr($1, 15, 12), t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3]
         for (i = 2; i <= NF; i++) if ($i ~ /^round=/) r = substr($i, 7)
         if ($0 ~ /event=round_sealed/) { if (!(r in sealed) || s < sealed[r]) sealed[r] = s }
         else committed[r] = s }
       END { for (r in committed) if (r in sealed) { d = committed[r] - sealed[r]; if (d < 0) d += 86400; print d } }' |
  sort -n)
if [[ -n $closes ]]; then
  n_closes=$(wc -l <<<"$closes")
  merges=$(cat "$work"/server-*.log | grep -c 'event=aggregate_merged' || true)
  with_sums=$(cat "$work"/server-*.log | grep 'event=aggregate_merged' | grep -vc 'partial_sums=0 ' || true)
  decoded=$(cat "$work"/server-*.log | grep -o 'event=aggregate_merged.* decoded=[0-9]*' |
    sed 's/.*decoded=//' | awk '{s += $1} END {print s + 0}')
  printf 'closes (seal to commit, %d rounds): median %.3f s, max %.3f s; %s of %s merges used partial sums flushed by the other aggregators; %s updates decoded from the ledger\n' \
    "$n_closes" "$(sed -n "$(((n_closes + 1) / 2))p" <<<"$closes")" "$(tail -1 <<<"$closes")" \
    "$with_sums" "$merges" "$decoded"
fi
if ((swarm_status != 0)) || [[ "$committed" != "$rounds" ]]; then
  echo "load.sh: FAILED (swarm exit $swarm_status, $committed of $rounds rounds committed)" >&2
  exit 1
fi
