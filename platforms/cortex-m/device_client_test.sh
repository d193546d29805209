#!/usr/bin/env bash
# The Cortex-M4F device (device_client.cpp, on QEMU's mps2-an386) against a real edgefl-server on
# the build machine, over the UART that QEMU bridges to the server's TCP port:
#   1. provisioned with a device certificate of the server's CA: mutual TLS 1.3, then two whole
#      rounds (model v1 built from the offer's seed, then v2 downloaded as a patch; training on the
#      shard in flash; sparq with error feedback; upload, commit, ack). The server accepts both
#      updates, commits both rounds and exits by itself; the RAM and TLS budgets are checked;
#   2. provisioned from another CA: the server refuses its certificate, nothing is offered;
#   3. a credentials partition with one flipped byte: the device refuses it before any network use;
#   4. the test build that drops its link mid-upload, between Commit and Ack, and mid-download
#      (QEMU's bridge redials: reconnect=1, for this run only): the device reconnects and
#      resumes; each update is counted once;
#   5. the test build that stays away, before its first upload, past the round's deadline: the
#      server abandons that round and opens the next; the device, back, drops its update of the
#      ended round (never committed, so never counted) and completes the next two rounds;
#   6. the provisioned device through a relay that damages three of the server's TLS records
#      (flaky_link.py): the Ack of round 1, the ModelChunk of round 2 on the next session, and the
#      server's Certificate in the handshake after it. Each is a bad MAC on the device: it
#      reconnects (a damaged handshake costs one or two failed attempts), asks the server's ledger about its
#      committed update (acked Duplicate), downloads again, and completes both rounds;
#   7. the server's state started again while the device waits for its Ack: the relay damages the
#      Ack of round 1 and sends the reconnect to a second server with a fresh state (its round 1
#      has another nonce). The device asks that server's ledger about its committed update, hears
#      NonceMismatch (never held there: not counted), and completes the new server's two rounds.
#
#   device_client_test.sh QEMU_SYSTEM_ARM DEVICE_ELF DROPS_ELF AWAY_ELF EDGEFL_SERVER EDGEFL_CLI WORK_DIR
set -euo pipefail
if [[ $# -ne 7 ]]; then
  echo "usage: $0 QEMU_SYSTEM_ARM DEVICE_ELF DROPS_ELF AWAY_ELF EDGEFL_SERVER EDGEFL_CLI WORK_DIR" >&2
  exit 2
fi
qemu=$1 elf=$2 drops_elf=$3 away_elf=$4 server=$5 cli=$6 work=$7
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
partition_address=0x003F0000  # mps2-an386.ld: CREDENTIALS

rm -rf "$work"
mkdir -p "$work"
server_log=$work/no-server.log
"$cli" certs --out "$work/pki" --devices 2 >/dev/null
"$cli" certs --out "$work/other-pki" --devices 1 >/dev/null
pki=$work/pki
model=mlp:784-8-10  # 6,370 parameters: the round fits 200 KiB (device_client.cpp's plan)

server_pid="" link_pid="" first_server_pid=""
cleanup() {
  local pid
  for pid in $server_pid $link_pid $first_server_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
}
trap cleanup EXIT
fail() {
  echo "device_client_test: FAIL: $*" >&2
  echo "--- server log ($server_log) ---" >&2
  tail -n 30 "$server_log" >&2 || true
  exit 1
}
# await_port_file FILE PID WHAT: FILE written by process PID within 20 s, or fail.
await_port_file() {
  for _ in $(seq 200); do
    [[ -s "$1" ]] && return 0
    kill -0 "$2" 2>/dev/null || fail "$3 exited before listening"
    sleep 0.1
  done
  fail "no port file from $3 after 20 s"
}
# start_server NAME ARGS...: edgefl-server for the development PKI on a free loopback port, state
# in $work/NAME, log in $work/NAME.log; sets server_pid, server_log and port.
start_server() {
  local name=$1
  shift
  server_log=$work/$name.log
  "$server" --state-dir "$work/$name" --ca "$pki/ca.crt" --cert "$pki/server.crt" --key "$pki/server.key" \
    --listen 127.0.0.1:0 --port-file "$work/$name.ports" --model "$model" "$@" >"$server_log" 2>&1 &
  server_pid=$!
  await_port_file "$work/$name.ports" "$server_pid" "edgefl-server ($name)"
  read -r port _ <"$work/$name.ports"
}
# The server, after its last round, drains and exits by itself: within 20 s, with status 0.
expect_server_exit() {
  for _ in $(seq 200); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$server_pid" 2>/dev/null && fail "edgefl-server still running 20 s after its last round"
  local status=0
  wait "$server_pid" || status=$?
  [[ $status -eq 0 ]] || fail "edgefl-server exited with status $status"
}
start_server rounds --codec sparq:0.1 --rounds 2 --cohort 1 --retry-after 100 --retry-window 200 --drain 500

credentials() {  # CA CERT KEY OUT
  python3 "$here/make_credentials.py" --server-name localhost --ca "$1" --cert "$2" --key "$3" --out "$4"
}
# Runs the device with partition $1; its output in $2; its exit status is printed. $3: another
# ELF. ICOUNT=1: -icount shift=0, so that virtual time counts instructions (the instructions per
# phase below; much slower for busy waits, so not for the reconnecting run). reconnect=1: when the
# server closes the connection, QEMU's bridge dials again a second later.
device() {
  local status=0 icount=() redial=""
  [[ ${ICOUNT:-0} == 1 ]] && icount=(-icount shift=0)
  [[ ${REDIAL:-0} == 1 ]] && redial=",reconnect=1"
  timeout 300 "$qemu" -M mps2-an386 -cpu cortex-m4 -nographic -monitor none "${icount[@]}" \
    -semihosting-config enable=on,target=native -serial "tcp:127.0.0.1:$port,nodelay=on$redial" \
    -device "loader,file=$1,addr=$partition_address,force-raw=on" -kernel "${3:-$elf}" >"$2" 2>&1 || status=$?
  echo "$status"
}
# relay_device NAME RELAY-ARGS...: the provisioned device through flaky_link.py (RELAY-ARGS after
# --server $port), redialing; its output in $work/NAME.out (printed), the relay's log in
# $work/NAME-link.log; sets status and link_pid.
relay_device() {
  local name=$1 server_port=$port
  shift
  python3 "$here/flaky_link.py" --listen-port-file "$work/$name-link.port" --server "$server_port" \
    --log "$work/$name-link.log" "$@" &
  link_pid=$!
  await_port_file "$work/$name-link.port" "$link_pid" "flaky_link.py"
  read -r port <"$work/$name-link.port"
  status=$(REDIAL=1 device "$work/device.bin" "$work/$name.out")
  port=$server_port
  cat "$work/$name.out"
}

# 1. A provisioned device: mutual TLS 1.3, then two rounds.
credentials "$pki/ca.crt" "$pki/devices/device-0001.crt" "$pki/devices/device-0001.key" "$work/device.bin"
status=$(ICOUNT=1 device "$work/device.bin" "$work/device.out")
cat "$work/device.out"
[[ $status -eq 0 ]] || fail "the provisioned device exited with status $status"
grep -q "^device: TLSv1.3 TLS1-3-AES-128-GCM-SHA256, server certificate verified for localhost" "$work/device.out" ||
  fail "no TLS 1.3 session"
grep -q "^device: round 1 model v1: built from the offer's seed, 0 bytes downloaded" "$work/device.out" ||
  fail "round 1 did not build model v1 from the seed"
grep -q "^device: round 2 model v2: patched, [1-9][0-9]* bytes downloaded, 1 patches, public-model SHA-256 verified" \
  "$work/device.out" || fail "round 2 did not download and verify the v2 patch"
[[ $(grep -c "^device: ack: round [12], accepted" "$work/device.out") -eq 2 ]] ||
  fail "the server did not accept both updates"
grep -q "^device: 2 of 2 rounds completed, 0 reconnects" "$work/device.out" || fail "two rounds were not completed"
expect_server_exit
[[ $(grep -c "event=round_committed" "$server_log") -eq 2 ]] || fail "the server did not commit two rounds"
grep -q "device=device-0001" "$server_log" || fail "the server did not log the device by its certificate"
# Budgets (issue 18): TLS <= 24 KiB per connection, the whole program's RAM <= 256 KiB (checked
# from the ELF: .data + .bss + stack), flash <= 512 KiB.
read -r tls_used round_used stack_used < <(sed -n 's/^device: footprint: TLS arena \([0-9]*\) of [0-9]* bytes, round arena \([0-9]*\) of [0-9]* bytes, stack \([0-9]*\) of .*/\1 \2 \3/p' "$work/device.out")
[[ -n ${tls_used:-} ]] || fail "no footprint line"
# The arenas are those sizes: what is asserted is headroom (a failed allocation would have ended
# the run): TLS <= 20 KiB of its 24, the stack <= 20 KiB of its 24 (below it sits the MPU guard).
((tls_used <= 20480)) || fail "TLS used $tls_used bytes: less than 4 KiB of headroom in its 24 KiB"
((stack_used <= 20480)) || fail "the stack reached $stack_used bytes: less than 4 KiB of headroom in its 24 KiB"
echo "device_client_test: TLS $tls_used B, round arena $round_used B, stack $stack_used B"
# Instructions per phase: QEMU runs with -icount shift=0 (one instruction = 1 ns of virtual time),
# so a tick of the board's 25 MHz timer is 40 instructions; waits for the server are left out.
echo "device_client_test: instructions per phase (round 0 = the TLS session):"
sed -n 's/^device: round \([0-9]*\) \([a-z ]*\): .* work \([0-9]*\) ticks.*/\1|\2|\3/p' "$work/device.out" |
  awk -F'|' '{ printf "  round %s %-10s %8.2f M\n", $1, $2, $3 * 40 / 1e6 }'

# The remaining cases run against a fresh server (the first drained).
start_server refusals --rounds 1 --cohort 1

# 2. Another CA's device: refused during the handshake.
credentials "$pki/ca.crt" "$work/other-pki/devices/device-0001.crt" "$work/other-pki/devices/device-0001.key" \
  "$work/stranger.bin"
status=$(device "$work/stranger.bin" "$work/stranger.out")
cat "$work/stranger.out"
# TLS 1.3: the client's handshake completes before the server checks its certificate; the refusal
# is the first record after it (status 15, "refused").
[[ $status -eq 15 ]] || fail "a device of another CA: status $status, expected 15 (refused)"
grep -q "offer:" "$work/stranger.out" && fail "a device of another CA was offered a task"
grep -q "event=tls_handshake_failed .*not trusted by the CA" "$server_log" ||
  fail "the server did not log the refused certificate"
grep -q "event=task_offer" "$server_log" && fail "the server offered a task to a device of another CA"

# 2b. The device checks the server too: a partition with another CA, or another server name, and
# the device refuses the server's certificate during the handshake (status 13).
credentials "$work/other-pki/ca.crt" "$pki/devices/device-0001.crt" "$pki/devices/device-0001.key" \
  "$work/wrong-ca.bin"
status=$(device "$work/wrong-ca.bin" "$work/wrong-ca.out")
cat "$work/wrong-ca.out"
[[ $status -eq 13 ]] || fail "a server certificate from another CA: status $status, expected 13"
grep -q "certificate verify flags 0x00000008" "$work/wrong-ca.out" || fail "the wrong CA was not refused as NOT_TRUSTED"
python3 "$here/make_credentials.py" --server-name otherhost --ca "$pki/ca.crt" --cert "$pki/devices/device-0001.crt" \
  --key "$pki/devices/device-0001.key" --out "$work/wrong-name.bin"
status=$(device "$work/wrong-name.bin" "$work/wrong-name.out")
cat "$work/wrong-name.out"
[[ $status -eq 13 ]] || fail "a server certificate for another name: status $status, expected 13"
grep -q "certificate verify flags 0x00000004" "$work/wrong-name.out" ||
  fail "the wrong name was not refused as CN_MISMATCH"

# 3. A corrupted partition: refused on the device.
cp "$work/device.bin" "$work/corrupt.bin"
printf '\x00' | dd of="$work/corrupt.bin" bs=1 seek=100 conv=notrunc status=none
status=$(device "$work/corrupt.bin" "$work/corrupt.out")
cat "$work/corrupt.out"
[[ $status -eq 10 ]] || fail "a corrupted partition: status $status, expected 10"
grep -q "fails its CRC32C" "$work/corrupt.out" || fail "a corrupted partition was not named as such"
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true

# 4. Drops: the link fails three times; every step resumes and nothing is counted twice.
start_server drops --codec sparq:0.1 --rounds 2 --cohort 1 --retry-after 100 --retry-window 200 --drain 500
status=$(REDIAL=1 device "$work/device.bin" "$work/drops.out" "$drops_elf")
cat "$work/drops.out"
[[ $status -eq 0 ]] || fail "the dropping device exited with status $status"
grep -q "^device: upload: the server holds 256 of [0-9]* bytes; resuming from there" "$work/drops.out" ||
  fail "the upload did not resume at byte 256"
grep -Eq "^device: upload: the server holds ([0-9]+) of \1 bytes; resuming from there" "$work/drops.out" ||
  fail "after the lost ack the server did not hold the whole upload"
grep -q "^device: ack: round 1, duplicate" "$work/drops.out" ||
  fail "the Commit repeated after the lost ack was not acked as a duplicate"
grep -q "^device: round 2 model v2: patched, .*download resumed" "$work/drops.out" || fail "the download did not resume"
grep -q "^device: 2 of 2 rounds completed, 3 reconnects" "$work/drops.out" || fail "not 2 rounds with 3 reconnects"
expect_server_exit
[[ $(grep -c "event=update_accepted" "$server_log") -eq 2 ]] || fail "not exactly 2 updates accepted"
[[ $(grep -c "event=update_duplicate" "$server_log") -eq 1 ]] || fail "not exactly 1 duplicate"
[[ $(grep -c "event=round_committed" "$server_log") -eq 2 ]] || fail "the drops server did not commit two rounds"

# 5. Away past the deadline (the device stays away 7 s; rounds last 5 s): round 1 is abandoned
# without the device, and so may be the next if the device comes back at its very end.
start_server away --codec sparq:0.1 --rounds 0 --cohort 1 --deadline 5 --retry-after 100 --retry-window 200
status=$(REDIAL=1 device "$work/device.bin" "$work/away.out" "$away_elf")
cat "$work/away.out"
[[ $status -eq 0 ]] || fail "the device that stayed away exited with status $status"
grep -Eq "^device: round [0-9]+ ended without this device's update \(another round opened while away\): not counted" \
  "$work/away.out" || fail "the device did not drop its update of the ended round"
[[ $(grep -c "^device: ack: round [2-9], accepted" "$work/away.out") -eq 2 ]] ||
  fail "the server did not accept two updates of later rounds"
grep -Eq "^device: 2 of 2 rounds completed, 1 reconnects, [12] rounds ended without this device" "$work/away.out" ||
  fail "not 2 rounds completed after one or two ended without the device"
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
abandoned=$(sed -nE "s/^device: round ([0-9]+) ended without this device's update \(another round opened while away\).*/\1/p" \
  "$work/away.out" | head -n 1)
grep -q "event=round_abandoned round=$abandoned " "$server_log" ||
  fail "the server did not abandon round $abandoned, whose update the device dropped"
[[ $(grep -c "event=round_committed" "$server_log") -eq 2 ]] || fail "the away server did not commit two rounds"
[[ $(grep -c "event=update_accepted" "$server_log") -eq 2 ]] || fail "not exactly 2 updates accepted"

# 6. A link that damages the server's records (bad MACs at three places): recovered, counted once.
start_server flaky --codec sparq:0.1 --rounds 2 --cohort 1 --retry-after 100 --retry-window 200 --drain 500
relay_device flaky --flip 1:10 --flip 2:12 --flip 3:5
[[ $status -eq 0 ]] || fail "the device behind a damaging link exited with status $status"
[[ $(grep -c "FLIPPED" "$work/flaky-link.log") -eq 3 ]] || fail "the relay did not damage three records"
[[ $(grep -c "^device: FAIL: reading a frame header: mbedTLS error -0x00007180" "$work/flaky.out") -eq 2 ]] ||
  fail "the device did not see two bad MACs (MBEDTLS_ERR_SSL_INVALID_MAC) mid-session"
# The damaged handshake fails, and so may the next attempt: the device sends no alert (this
# mbedTLS build has no MBEDTLS_SSL_ALL_ALERT_MESSAGES), so the server keeps the broken session
# until its handshake timeout and the next ClientHello can land in it. Two attempts at most.
failed_handshakes=$(grep -c "^device: FAIL: reconnecting: handshake: mbedTLS error" "$work/flaky.out" || true)
[[ $failed_handshakes -ge 1 && $failed_handshakes -le 2 ]] ||
  fail "the damaged handshake cost $failed_handshakes failed attempts, expected 1 or 2"
# Each damage hit what it was meant to: the Ack of round 1, then a ModelChunk of round 2 (after
# round 2's offer, before its model).
awk '/^device: ack: round 1, accepted/ { accepted1 = 1 }
     /^device: FAIL: reading a frame header: mbedTLS error -0x00007180/ { n++; if (n == 1) { ok1 = seen_update1 }
                                                                         if (n == 2) { ok2 = seen_offer2 && !seen_model2 } }
     /^device: round 1 update:/ { seen_update1 = 1 }
     /^device: round 2 offer:/ { seen_offer2 = 1 }
     /^device: round 2 model v2/ { seen_model2 = 1 }
     END { exit !(ok1 && ok2 && !accepted1) }' "$work/flaky.out" ||
  fail "the bad MACs did not fall on the Ack of round 1 and on the download of round 2"
grep -q "^device: ack: round 1, duplicate" "$work/flaky.out" ||
  fail "the update committed before the damaged Ack was not acked as a duplicate"
grep -q "^device: 2 of 2 rounds completed, 2 reconnects" "$work/flaky.out" || fail "not 2 rounds with 2 reconnects"
expect_server_exit
kill "$link_pid" 2>/dev/null || true
wait "$link_pid" 2>/dev/null || true
[[ $(grep -c "event=update_accepted" "$server_log") -eq 2 ]] || fail "not exactly 2 updates accepted"
[[ $(grep -c "event=update_duplicate" "$server_log") -eq 1 ]] || fail "not exactly 1 duplicate"
[[ $(grep -c "event=round_committed" "$server_log") -eq 2 ]] || fail "the flaky server did not commit two rounds"

# 7. The server's state started again during the lost Ack: the update is asked about, not counted.
start_server after-wipe --codec sparq:0.1 --rounds 2 --cohort 1 --retry-after 100 --retry-window 200 --drain 500
second_server_pid=$server_pid second_server_log=$server_log second_port=$port
start_server before-wipe --codec sparq:0.1 --rounds 2 --cohort 1 --retry-after 100 --retry-window 200
first_server_pid=$server_pid first_server_log=$server_log
server_pid=$second_server_pid server_log=$second_server_log  # the one expected to finish
relay_device wiped --flip 1:10 --switch "2:$second_port"
[[ $status -eq 0 ]] || fail "the device whose server started again exited with status $status"
grep -q "^conn 2 open to port $second_port" "$work/wiped-link.log" || fail "the reconnect did not reach the second server"
grep -q "event=update_accepted round=1 device=device-0001" "$first_server_log" ||
  fail "the first server did not accept the update whose Ack was damaged"
grep -q "^device: the server answered Error 6: the round nonce does not match round 1" "$work/wiped.out" ||
  fail "the second server did not answer NonceMismatch to the UploadStart of the first server's round 1"
# The damaged Ack was never read; the update ended uncounted, and only then was round 1 acked,
# by the second server.
awk '/^device: round 1 ended without this device.s update \(the server.s round of that id has another nonce and never held the update\): not counted/ { ended = NR }
     /^device: ack: round 1, accepted/ { if (!acked) acked = NR }
     END { exit !(ended && acked > ended) }' "$work/wiped.out" ||
  fail "the device did not drop its round 1 update as never held, then join the new round 1"
grep -q "^device: 2 of 2 rounds completed, 1 reconnects, 1 rounds ended without this device" "$work/wiped.out" ||
  fail "not 2 rounds completed after the one that ended with the first server"
expect_server_exit
kill "$link_pid" "$first_server_pid" 2>/dev/null || true
wait "$link_pid" "$first_server_pid" 2>/dev/null || true
[[ $(grep -c "event=update_accepted" "$server_log") -eq 2 ]] || fail "the second server did not accept 2 updates"
grep -q "event=update_duplicate" "$server_log" && fail "the second server counted the first server's update"
[[ $(grep -c "event=round_committed" "$server_log") -eq 2 ]] || fail "the second server did not commit two rounds"
echo "device_client_test: ok"
