#!/usr/bin/env bash
# examples/pytorch: your own PyTorch model, federated by edgefl, end to end on loopback.
#
#   bash examples/pytorch/run.sh [WORK_DIR]
#     after: bash platforms/deps/setup.sh --torch
#            cmake --preset release -DEDGEFL_BUILD_TORCH_EXAMPLES=ON && cmake --build --preset release
#
#   1. model.py       defines FashionNet (an nn.Module), scripts it to fashion_net.pt and exports its
#                     initial weights to initial.safetensors (with the preprocessing in __metadata__)
#   2. edgefl certs   a development PKI
#   3. edgefl_torch_server = edgefl-server --initial-model initial.safetensors, evaluating every
#                     version with the TorchScript module (--torch-eval)
#   4. DEVICES x edgefl_torch_device: each trains fashion_net.pt with libtorch on its shard of
#                     Fashion-MNIST; edgefl compresses (sparq) and uploads the delta
#   5. evaluate.py    loads state/global.safetensors into FashionNet (load_state_dict, strict) and
#                     evaluates it with PyTorch: it must agree with the server to the fourth digit
#
# Settings (environment): DEVICES (4), ROUNDS (8), STEPS (60 local SGD steps per round), CODEC
# (sparq:0.1), EDGEFL_BUILD_DIR (build/release), PYTHON (/usr/bin/python3: Debian's, with torch).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${EDGEFL_BUILD_DIR:-$root/build/release}
work=${1:-$root/build/pytorch-walkthrough}
DEVICES=${DEVICES:-4}
ROUNDS=${ROUNDS:-8}
STEPS=${STEPS:-60}
CODEC=${CODEC:-sparq:0.1}
PYTHON=${PYTHON:-/usr/bin/python3}
edgefl=$build/sdk/cli/edgefl
server=$build/examples/pytorch/edgefl_torch_server
device=$build/examples/pytorch/edgefl_torch_device
for binary in "$edgefl" "$server" "$device"; do
  [[ -x $binary ]] || { echo "run.sh: $binary is missing (configure with -DEDGEFL_BUILD_TORCH_EXAMPLES=ON)" >&2; exit 2; }
done
"$PYTHON" -c "import torch" 2>/dev/null || { echo "run.sh: $PYTHON has no torch (Debian: python3-torch)" >&2; exit 2; }

rm -rf "$work"
mkdir -p "$work/logs"
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  exit "$status"
}
trap cleanup EXIT

echo "== 1. the model, in PyTorch"
(cd "$here" && "$PYTHON" model.py "$work")
echo "== 2. a development PKI"
"$edgefl" certs --out "$work/pki" --devices "$DEVICES" >/dev/null
echo "== 3. edgefl-server --initial-model initial.safetensors (evaluating with the TorchScript module)"
"$server" --torch-eval "$work/fashion_net.pt" --state-dir "$work/state" --initial-model "$work/initial.safetensors" \
  --ca "$work/pki/ca.crt" --cert "$work/pki/server.crt" --key "$work/pki/server.key" \
  --listen 127.0.0.1:0 --port-file "$work/ports" --rounds "$ROUNDS" --cohort "$DEVICES" --over-selection 1 \
  --codec "$CODEC" --epochs 1 --max-steps "$STEPS" --batch 32 --lr 0.02 --momentum 0.9 --update-norm-factor 4 \
  --summary "$work/summary.jsonl" --progress --drain 1000 >"$work/logs/server.out" 2>"$work/logs/server.log" &
server_pid=$!
pids+=("$server_pid")
for _ in $(seq 300); do
  [[ -s $work/ports ]] && break
  kill -0 "$server_pid" 2>/dev/null || { tail -n 20 "$work/logs/server.log" >&2; exit 1; }
  sleep 0.1
done
read -r port _ <"$work/ports"
grep -h "event=model_created\|event=evaluation" "$work/logs/server.log" | sed 's/^ts=[^ ]* //'

echo "== 4. $DEVICES devices train FashionNet with libtorch"
device_pids=()
for ((i = 0; i < DEVICES; i++)); do
  id=$(printf 'device-%04d' $((i + 1)))
  "$device" --module "$work/fashion_net.pt" --server "127.0.0.1:$port" --ca "$work/pki/ca.crt" \
    --cert "$work/pki/devices/$id.crt" --key "$work/pki/devices/$id.key" --shard "$i/$DEVICES" \
    >"$work/logs/$id.out" 2>"$work/logs/$id.log" &
  device_pids+=($!)
  pids+=($!)
done
for pid in "${device_pids[@]}"; do
  wait "$pid" || { echo "run.sh: a device failed:" >&2; tail -n 5 "$work"/logs/device-*.log >&2; exit 1; }
done
wait "$server_pid" || { echo "run.sh: edgefl-server failed:" >&2; tail -n 20 "$work/logs/server.log" >&2; exit 1; }
cat "$work/logs/server.out"
head -n 2 "$work/logs/device-0001.out"

echo "== 5. the global model back in PyTorch"
expect=$("$PYTHON" -c '
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(next(r["test_accuracy"] for r in reversed(rows) if r.get("test_accuracy") is not None))' "$work/summary.jsonl")
(cd "$here" && "$PYTHON" evaluate.py "$work/state/global.safetensors" --expect "$expect")
