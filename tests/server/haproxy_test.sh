#!/usr/bin/env bash
# HAProxy in front of edgefl-server (ctest server.haproxy): the shipped configuration
# (platforms/haproxy/edgefl-haproxy.sh) in TCP mode passes mutual TLS through, so the server
# authenticates each device by its own certificate; /healthz takes an aggregator that does not
# answer out of the rotation.
#
#   haproxy_test.sh EDGEFL_CLI EDGEFL_SERVER WORK_DIR
#
# One live aggregator and one that is down (nothing listens on its ports): HAProxy's checks mark
# the first UP and the second DOWN; two devices connect to the front only, both updates are
# accepted, the round commits with both, the server's log names each device by its certificate,
# and every device session went to the live aggregator.
set -euo pipefail
cli=$1 server=$2 work=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
fail() {
  echo "haproxy_test: $*" >&2
  for f in "$work"/*.log "$work"/*.err "$work"/*.out; do [[ -f $f ]] && { echo "--- $f"; tail -n 30 "$f"; }; done >&2
  exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
stats() {  # the CSV of HAProxy's "show stat"
  python3 - "$work/haproxy.sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.decode())
PY
}
# The named server's column COLUMN (status, stot, ...) from the stats CSV.
column() {
  stats | python3 -c '
import csv, sys
rows = list(csv.reader(line.lstrip("# ") for line in sys.stdin if line.strip()))
head = rows[0]
for r in rows[1:]:
    if r[0] == "edgefl_aggregators" and r[1] == sys.argv[1]:
        print(r[head.index(sys.argv[2])])
' "$1" "$2"
}

"$cli" certs --out "$work/pki" --devices 2 >/dev/null
pki=$work/pki
"$server" --state-dir "$work/state" --ca "$pki/ca.crt" --cert "$pki/server.crt" --key "$pki/server.key" \
  --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --port-file "$work/ports" --model mlp:784-16-10 \
  --rounds 1 --cohort 2 --over-selection 1 --drain 1000 >"$work/server.out" 2>"$work/server.log" &
pids+=($!)
for _ in $(seq 200); do [[ -s $work/ports ]] && break; sleep 0.1; done
read -r port metrics <"$work/ports" || fail "the server did not start"
front=$(free_port)
dead=$(free_port)
dead_metrics=$(free_port)
EDGEFL_HAPROXY_STATS="$work/haproxy.sock" EDGEFL_HAPROXY_MAXCONN=1000 bash "$here/platforms/haproxy/edgefl-haproxy.sh" "127.0.0.1:$front" \
  "127.0.0.1:$port/$metrics" "127.0.0.1:$dead/$dead_metrics" >"$work/haproxy.cfg"
haproxy -c -q -f "$work/haproxy.cfg" || fail "haproxy refuses the configuration"
haproxy -db -f "$work/haproxy.cfg" >"$work/haproxy.out" 2>"$work/haproxy.err" &
pids+=($!)
for _ in $(seq 100); do
  [[ -S $work/haproxy.sock && $(column aggregator1 status 2>/dev/null) == UP &&
     $(column aggregator2 status 2>/dev/null) == DOWN* ]] && break
  sleep 0.2
done
[[ $(column aggregator1 status) == UP ]] || fail "the live aggregator is not UP: $(column aggregator1 status)"
[[ $(column aggregator2 status) == DOWN* ]] || fail "the dead aggregator is not DOWN: $(column aggregator2 status)"

device() {  # N: run device N through the front
  local id
  id=$(printf 'device-%04d' "$1")
  "$cli" client --server "127.0.0.1:$front" --ca "$pki/ca.crt" --cert "$pki/devices/$id.crt" \
    --key "$pki/devices/$id.key" --shard "$1/100" --rounds 1 --give-up-after 120 \
    >"$work/$id.out" 2>"$work/$id.err"
}
device 1 &
first=$!
device 2 || fail "device 2 failed"
wait "$first" || fail "device 1 failed"
for id in device-0001 device-0002; do
  grep -q "round 1 (model v1): accepted" "$work/$id.out" || fail "$id: no accepted round"
  grep -q "event=device_connected .*device=$id tls=TLSv1.3" "$work/server.log" || fail "$id: not authenticated by the server"
done
grep -q "event=round_committed round=1 updates=2 " "$work/server.log" || fail "round 1 did not commit both updates"
sessions=$(column aggregator1 stot)
[[ $sessions -ge 2 ]] || fail "the live aggregator saw $sessions sessions through HAProxy"
[[ $(column aggregator2 stot) == 0 ]] || fail "a device was sent to the dead aggregator"
echo "haproxy_test: 2 devices through HAProxy (TCP, mutual TLS to edgefl-server): accepted, round committed;" \
  "aggregator1 UP with $sessions sessions, aggregator2 $(column aggregator2 status) with 0"
grep "event=device_connected" "$work/server.log" | head -2
