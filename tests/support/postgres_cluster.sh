#!/usr/bin/env bash
# A private PostgreSQL 15 cluster for tests: initdb in a directory of its own, listening on one
# loopback port (no Unix socket outside that directory), fsync and synchronous_commit on (the
# durability the server's promise rests on), stopped and removed by `stop`.
#
#   postgres_cluster.sh start DIR   # DIR must not exist; writes DIR/conninfo (a libpq
#                                   # connection string for the database "postgres") and DIR/url
#                                   # (postgresql://user@host:port, to which /DB is appended)
#   postgres_cluster.sh stop DIR    # stops the cluster (fast shutdown) and removes DIR
#   postgres_cluster.sh kill DIR    # immediate stop (a crash: no checkpoint, no clean shutdown)
#   postgres_cluster.sh resume DIR  # start the stopped cluster again (crash recovery runs)
#
# PostgreSQL refuses to run as root: as root, the cluster runs as the `postgres` user that
# Debian's postgresql-15 package creates. Authentication is `trust` on 127.0.0.1 only: the cluster
# lives for one test run, in a directory only its owner can read.
set -euo pipefail
bin=${EDGEFL_POSTGRES_BIN:-/usr/lib/postgresql/15/bin}
action=${1:?usage: postgres_cluster.sh start|stop|kill|resume DIR}
dir=${2:?usage: postgres_cluster.sh start|stop|kill|resume DIR}

as_owner() {  # runs "$@" as the cluster's owner
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_server() {
  local port
  port=$(cat "$dir/port")
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir/run" start >/dev/null
}

case $action in
  start)
    [[ -x $bin/initdb ]] || { echo "postgres_cluster: no $bin/initdb (Debian: postgresql-15)" >&2; exit 2; }
    [[ ! -e $dir ]] || { echo "postgres_cluster: $dir exists" >&2; exit 2; }
    mkdir -p "$dir/run"
    if [[ $(id -u) -eq 0 ]]; then chown -R postgres: "$dir"; fi
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
      >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    cat >>"$dir/data/postgresql.conf" <<'EOF'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
shared_buffers = 64MB
EOF
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
      >"$dir/port"
    start_server || { cat "$dir/server.log" >&2; exit 1; }
    echo "host=127.0.0.1 port=$(cat "$dir/port") user=postgres dbname=postgres connect_timeout=5" >"$dir/conninfo"
    echo "postgresql://postgres@127.0.0.1:$(cat "$dir/port")" >"$dir/url"
    ;;
  stop)
    [[ -d $dir/data ]] || exit 0
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  kill)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
    ;;
  resume)
    start_server || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  *)
    echo "postgres_cluster: unknown action $action" >&2
    exit 2
    ;;
esac
