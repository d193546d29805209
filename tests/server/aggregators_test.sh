#!/usr/bin/env bash
# Three edgefl-server aggregators on one PostgreSQL database behind HAProxy (ctest
# server.haproxy.aggregators, on the private cluster of the edgefl_postgres fixture):
#
#   aggregators_test.sh EDGEFL_CLI EDGEFL_SERVER WORK_DIR        (EDGEFL_TEST_POSTGRES_DIR set)
#
# DEVICES (200) devices of `edgefl swarm` reach the aggregators through the shipped HAProxy
# configuration only (TCP mode, mutual TLS ends at edgefl-server). In the second round a follower
# is killed (-9) and started again; once ROUNDS / 2 rounds have committed, the coordinator is
# (another aggregator takes the lease and the rounds go on); a round later the database crashes
# for 3 s. Checks: no device fails, every round commits with at least its cohort, the
# database holds exactly the updates its rounds counted, every aggregator served devices, a
# round's close merged updates other aggregators acknowledged, and the lease changed hands.
# EDGEFL_AGGREGATORS_DEVICES, _ROUNDS, _COHORT change the size (the README's scale runs use
# tests/server/load.sh with EDGEFL_LOAD_AGGREGATORS=3).
set -euo pipefail
cli=$1 server=$2 work=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pg=${EDGEFL_TEST_POSTGRES_DIR:?aggregators_test.sh: a PostgreSQL run only (ctest sets EDGEFL_TEST_POSTGRES_DIR)}
devices=${EDGEFL_AGGREGATORS_DEVICES:-200}
rounds=${EDGEFL_AGGREGATORS_ROUNDS:-6}
cohort=${EDGEFL_AGGREGATORS_COHORT:-50}
rm -rf "$work"
mkdir -p "$work"
ulimit -n "$(( devices * 8 + 4096 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() {
  echo "aggregators_test: $*" >&2
  for f in "$work"/*.log "$work"/*.err; do [[ -f $f ]] && { echo "--- $f"; tail -n 20 "$f"; }; done >&2
  exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
column() {  # column COLUMN of HAProxy's stats row for server $1 (status, stot, ...)
  python3 - "$work/haproxy.sock" "$1" "$2" <<'PY'
import csv, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
rows = list(csv.reader(l.lstrip("# ") for l in data.decode().splitlines() if l.strip()))
for r in rows[1:]:
    if r[0] == "edgefl_aggregators" and r[1] == sys.argv[2]:
        print(r[rows[0].index(sys.argv[3])])
PY
}
sql() { psql "$(cat "$pg/conninfo")" -qtAX -c "$1"; }
dbsql() { psql "host=127.0.0.1 port=$pg_port user=postgres dbname=$db" -qtAX -c "$1"; }

db=edgefl_aggregators_test
pg_port=$(sed -n 's/.*port=\([0-9]*\).*/\1/p' "$pg/conninfo")
sql "DROP DATABASE IF EXISTS $db" && sql "CREATE DATABASE $db"
url="$(cat "$pg/url")/$db"
"$cli" certs --out "$work/pki" --devices "$devices" >/dev/null
pki=$work/pki

# After the last round every aggregator answers "draining" for longer than a device's longest
# reconnect backoff (10 s, ClientOptions::backoff_max_ms): the devices the kill sent into backoff
# must find one still answering when they come back.
drain_ms=12000
ports=() metrics=() server_pid=() lives=(0 0 0 0)
start_aggregator() {  # N: start (or restart) aggregator N on its ports; waits until it listens
  local n=$1 life=${lives[$1]}
  lives[n]=$((life + 1))
  rm -f "$work/ports-$n"
  "$server" --aggregator-id "agg$n" --coordinator-lease 2 --state "$url" --state-dir "$work/state" \
    --ca "$pki/ca.crt" --cert "$pki/server.crt" --key "$pki/server.key" \
    --listen "127.0.0.1:${ports[n]}" --metrics "127.0.0.1:${metrics[n]}" --port-file "$work/ports-$n" \
    --model mlp:784-16-10 --rounds "$rounds" --cohort "$cohort" --deadline 120 --drain "$drain_ms" \
    --max-connections "$(( devices + 100 ))" >"$work/aggregator$n-$((life + 1)).out" \
    2>"$work/aggregator$n-$((life + 1)).log" &
  server_pid[n]=$!
  pids+=($!)
  for _ in $(seq 300); do [[ -s $work/ports-$n ]] && return 0; sleep 0.1; done
  fail "aggregator $n did not start"
}
backends=()
for n in 1 2 3; do
  ports[n]=$(free_port)
  metrics[n]=$(free_port)
  start_aggregator "$n"
  backends+=("127.0.0.1:${ports[n]}/${metrics[n]}")
done

front=$(free_port)
EDGEFL_HAPROXY_STATS="$work/haproxy.sock" EDGEFL_HAPROXY_MAXCONN=$(( devices * 2 + 100 )) \
  bash "$here/platforms/haproxy/edgefl-haproxy.sh" "127.0.0.1:$front" "${backends[@]}" >"$work/haproxy.cfg"
haproxy -c -q -f "$work/haproxy.cfg" || fail "haproxy refuses the configuration"
haproxy -db -f "$work/haproxy.cfg" >"$work/haproxy.out" 2>"$work/haproxy.err" &
pids+=($!)
for _ in $(seq 100); do
  up=0
  for n in 1 2 3; do [[ -S $work/haproxy.sock && $(column aggregator$n status 2>/dev/null) == UP ]] && up=$((up + 1)); done
  ((up == 3)) && break
  sleep 0.2
done
((up == 3)) || fail "only $up of 3 aggregators are UP in HAProxy"

"$cli" swarm --pki "$pki" --devices "$devices" --server "127.0.0.1:$front" --rounds "$rounds" \
  >"$work/swarm.txt" 2>"$work/swarm.err" &
swarm=$!
pids+=($swarm)

committed() { cat "$work"/aggregator*.log | grep -o 'event=round_committed round=[0-9]*' | sort -u | wc -l; }
coordinator() {  # the aggregator whose latest life was elected last and not deposed since
  local n log
  for n in 1 2 3; do
    log=$work/aggregator$n-${lives[n]}.log
    if grep -q 'event=coordinator_elected' "$log" &&
       ! sed -n '/event=coordinator_elected/,$p' "$log" | grep -q 'event=coordinator_lease_lost'; then
      echo "$n"
      return
    fi
  done
}
wait_committed() {  # N: until N rounds have committed
  for _ in $(seq 1200); do (( $(committed) >= $1 )) && return 0; sleep 0.1; done
  fail "$(committed) rounds committed, waiting for $1"
}
kill_and_restart() {  # N: aggregator N killed -9, started again a second later
  kill -9 "${server_pid[$1]}"
  wait "${server_pid[$1]}" 2>/dev/null || true
  sleep 1
  start_aggregator "$1"
}
# 1. A follower dies in the second round, with updates it acknowledged in the ledger.
wait_committed 1
sleep 0.5
leader=$(coordinator)
[[ -n $leader ]] || fail "no coordinator found in the logs"
follower=$(( leader % 3 + 1 ))
kill_and_restart "$follower"
# 2. The coordinator dies half way.
wait_committed $(( rounds / 2 ))
victim=$(coordinator)
[[ -n $victim ]] || fail "no coordinator found in the logs"
kill_and_restart "$victim"
# 3. The database crashes mid-round (immediate stop: no checkpoint) and comes back 3 s later,
#    longer than the 2 s lease: the aggregators retry, the balancer sees /healthz fail and recover.
wait_committed $(( rounds / 2 + 1 ))
sleep 0.5
bash "$here/tests/support/postgres_cluster.sh" kill "$pg" >/dev/null
sleep 3
bash "$here/tests/support/postgres_cluster.sh" resume "$pg" >/dev/null

wait "$swarm" || fail "a device failed: $(head -5 "$work/swarm.err")"
for n in 1 2 3; do wait "${server_pid[n]}" || true; done

(( $(committed) == rounds )) || fail "$(committed) of $rounds rounds committed"
[[ $(dbsql "SELECT count(*) FROM rounds WHERE state = 2") == "$rounds" ]] || fail "the database has other rounds"
short=$(dbsql "SELECT count(*) FROM rounds WHERE state = 2 AND accepted_updates < $cohort")
[[ $short == 0 ]] || fail "$short rounds committed with fewer than $cohort updates"
counted=$(dbsql "SELECT sum(accepted_updates) FROM rounds")
rows=$(dbsql "SELECT count(*) FROM updates")
[[ $counted == "$rows" ]] || fail "the rounds counted $counted updates, the ledger holds $rows"
for n in 1 2 3; do
  sessions=$(column aggregator$n stot)
  ((sessions > 0)) || fail "aggregator $n served no device"
  echo "aggregator $n: $sessions sessions through HAProxy"
done
merged=$(cat "$work"/aggregator*.log | grep -c 'event=aggregate_merged' || true)
with_sums=$(cat "$work"/aggregator*.log | grep 'event=aggregate_merged' | grep -vc 'partial_sums=0 ' || true)
decoded=$(cat "$work"/aggregator*.log | grep -o 'event=aggregate_merged.* decoded=[0-9]*' |
  sed 's/.*decoded=//' | awk '{s += $1} END {print s + 0}')
((with_sums > 0)) || fail "no close merged a partial sum flushed by another aggregator"
elections=$(cat "$work"/aggregator*.log | grep -c 'event=coordinator_elected' || true)
((elections >= 2)) || fail "the lease never changed hands ($elections elections)"
echo "aggregators_test: $devices devices through HAProxy to 3 aggregators on PostgreSQL; follower" \
  "agg$follower killed -9 in round 2, coordinator agg$victim after round $((rounds / 2)), the database" \
  "crashed for 3 s in round $((rounds / 2 + 2)); $rounds rounds committed, $rows updates in the ledger," \
  "$with_sums of $merged closes merged partial sums flushed by the other aggregators ($decoded updates" \
  "decoded from the ledger instead), $elections elections"
