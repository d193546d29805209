#!/usr/bin/env bash
# Real rounds through the C API: a development PKI, edgefl-server on a free loopback port running
# one round per client (cohort 1), then each client in turn as its own device, called as
#   CLIENT... HOST:PORT CA_FILE CERT_FILE KEY_FILE
# After the last round the server drains and must exit by itself with status 0.
#
#   round_test.sh EDGEFL_CLI EDGEFL_SERVER WORK_DIR -- CLIENT [ARGS...] [-- CLIENT [ARGS...]]...
set -euo pipefail
if [[ $# -lt 5 || $4 != "--" ]]; then
  echo "usage: $0 EDGEFL_CLI EDGEFL_SERVER WORK_DIR -- CLIENT [ARGS...] [-- CLIENT [ARGS...]]..." >&2
  exit 2
fi
cli=$1 server=$2 work=$3
shift 4
# Clients, one per element, their words separated by the unit separator (\x1f).
clients=()
current=""
for word in "$@"; do
  if [[ $word == "--" ]]; then
    clients+=("$current")
    current=""
  else
    current+="${current:+$'\x1f'}$word"
  fi
done
clients+=("$current")
rounds=${#clients[@]}

rm -rf "$work"
mkdir -p "$work"
"$cli" certs --out "$work/pki" --devices "$rounds" >/dev/null
pki=$work/pki

"$server" --state-dir "$work/state" --ca "$pki/ca.crt" --cert "$pki/server.crt" --key "$pki/server.key" \
  --listen 127.0.0.1:0 --port-file "$work/ports" --model mlp:784-16-10 --rounds "$rounds" --cohort 1 \
  --retry-after 100 --retry-window 200 --drain 500 >"$work/server.log" 2>&1 &
server_pid=$!
cleanup() {
  if kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
fail() {
  echo "round_test: $*" >&2
  echo "--- server log ($work/server.log) ---" >&2
  tail -n 40 "$work/server.log" >&2 || true
  exit 1
}

for _ in $(seq 200); do  # up to 20 s
  [[ -s "$work/ports" ]] && break
  kill -0 "$server_pid" 2>/dev/null || fail "edgefl-server exited before listening"
  sleep 0.1
done
[[ -s "$work/ports" ]] || fail "no port file after 20 s"
read -r port _ <"$work/ports"

device=0
for client in "${clients[@]}"; do
  device=$((device + 1))
  IFS=$'\x1f' read -r -a command <<<"$client"
  id=$(printf 'device-%04d' "$device")
  "${command[@]}" "127.0.0.1:$port" "$pki/ca.crt" "$pki/devices/$id.crt" "$pki/devices/$id.key" ||
    fail "client $device (${command[0]}) failed"
done

for _ in $(seq 200); do  # the server drains, then exits
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$server_pid" 2>/dev/null; then fail "edgefl-server still running 20 s after its last round"; fi
status=0
wait "$server_pid" || status=$?
[[ $status -eq 0 ]] || fail "edgefl-server exited with status $status"
echo "round_test: $rounds round(s) through the C API: ok"
