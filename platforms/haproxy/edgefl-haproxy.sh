#!/usr/bin/env bash
# Writes an HAProxy configuration that fronts edgefl-server aggregators for devices:
#
#   platforms/haproxy/edgefl-haproxy.sh FRONT AGGREGATOR... > edgefl.cfg
#   haproxy -f edgefl.cfg                     # HAProxy 2.6 from Debian 12 (package haproxy)
#
#   FRONT       the devices' address, host:port (e.g. 0.0.0.0:7443)
#   AGGREGATOR  host:port/metrics_port of one edgefl-server: its device listener (--listen) and its
#               --metrics port, where HAProxy asks GET /healthz
#
# TCP mode: HAProxy passes the TLS bytes through untouched, so mutual TLS ends at edgefl-server,
# which verifies the device's certificate itself; HAProxy never holds a key. A device's connection
# goes to the aggregator with the fewest connections among those whose /healthz answers 200 (an
# aggregator that is stopping, draining, or cannot reach its state store answers 503 and gets no
# new devices within two checks, 2 s apart). Timeouts are above the server's idle timeout (60 s),
# so the server, not the proxy, ends idle sessions. EDGEFL_HAPROXY_STATS=PATH adds an admin socket
# (`echo "show stat" | socat - PATH`, or the tests' python one-liner). EDGEFL_HAPROXY_MAXCONN
# (10000) bounds the proxied connections; HAProxy needs two descriptors per connection, so the
# file limit it runs under (ulimit -n) must allow about twice as many.
set -euo pipefail
front=${1:?usage: edgefl-haproxy.sh FRONT AGGREGATOR...}
shift
(($# > 0)) || { echo "edgefl-haproxy.sh: name at least one aggregator (host:port/metrics_port)" >&2; exit 2; }

cat <<CFG
global
  maxconn ${EDGEFL_HAPROXY_MAXCONN:-10000}
  log stderr format short local0 notice
CFG
if [[ -n "${EDGEFL_HAPROXY_STATS:-}" ]]; then
  echo "  stats socket ${EDGEFL_HAPROXY_STATS} mode 600 level admin"
fi
cat <<CFG

defaults
  mode tcp
  log global
  option tcplog
  timeout connect 5s
  timeout client 90s
  timeout server 90s
  timeout check 3s

frontend edgefl_devices
  bind ${front}
  default_backend edgefl_aggregators

backend edgefl_aggregators
  balance leastconn
  option httpchk
  http-check send meth GET uri /healthz ver HTTP/1.0
  http-check expect status 200
  default-server inter 2s fall 2 rise 2
CFG
n=0
for aggregator in "$@"; do
  address=${aggregator%/*}
  metrics=${aggregator##*/}
  [[ $address != "$aggregator" && -n $metrics ]] || {
    echo "edgefl-haproxy.sh: $aggregator: expected host:port/metrics_port" >&2
    exit 2
  }
  n=$((n + 1))
  echo "  server aggregator${n} ${address} check port ${metrics}"
done
