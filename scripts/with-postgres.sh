#!/usr/bin/env bash
# Runs a command beside a throw-away PostgreSQL cluster: initdb into a temporary folder, a server on a free
# loopback port (as the `postgres` user when run as root, since PostgreSQL refuses to run as root), password
# authentication over TCP, then the command with these set, and the cluster stopped and removed afterwards:
#   BROKER_TEST_POSTGRES           postgres://postgres@127.0.0.1:PORT/postgres (no password in it)
#   BROKER_TEST_POSTGRES_PASSWORD  the superuser's password (pass it as BROKER_DATABASE_PASSWORD)
#   BROKER_TEST_PG_BIN, BROKER_TEST_PG_DATA, BROKER_TEST_PG_OPTIONS
#                                  to stop and start the server in fault tests (scripts/with-postgres.sh pg_ctl …)
# Usage: scripts/with-postgres.sh COMMAND [ARG…]     e.g. scripts/with-postgres.sh swift test --filter Postgres
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bin" ]; then
  echo "with-postgres: PostgreSQL is not installed (scripts/setup.sh installs Debian's postgresql)" >&2
  exit 1
fi
dir=$(mktemp -d /tmp/broker-pg.XXXXXX)
chmod 0755 "$dir"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi

stop() {
  as_owner "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

printf '%s\n' "$password" > "$dir/pwfile"
if [ "$(id -u)" = 0 ]; then chown postgres "$dir/pwfile"; fi
as_owner "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" -E UTF8 --locale=C.UTF-8 \
  --auth-local=trust --auth-host=scram-sha-256 >/dev/null
rm -f "$dir/pwfile"
options="-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=400 -c fsync=off -c synchronous_commit=off"
as_owner "$bin/pg_ctl" -D "$dir/data" -o "$options" -l "$dir/server.log" -w -t 60 start >/dev/null

export BROKER_TEST_POSTGRES="postgres://postgres@127.0.0.1:$port/postgres"
export BROKER_TEST_POSTGRES_PASSWORD="$password"
export BROKER_TEST_PG_BIN="$bin" BROKER_TEST_PG_DATA="$dir/data" BROKER_TEST_PG_OPTIONS="$options"
echo "with-postgres: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port" >&2
"$@"
