#!/usr/bin/env bash
# Install (Debian apt) and start a private PostgreSQL server for Optuna's database storage
# (tuning.storage=postgresql://...), listening on 127.0.0.1 only, with a database and a user.
# Idempotent: rerunning leaves a running server alone. Prints the database URL on stdout (the
# only thing it prints there); progress and errors go to stderr.
#
#   export ESOPT_TEST_POSTGRES_URL=$(bash scripts/start_postgres.sh)    # CI (.ci/run) does this
#   ESOPT_POSTGRES_PORT=5440 ESOPT_POSTGRES_DIR=/tmp/pg bash scripts/start_postgres.sh
#
# Layout: its own cluster (initdb) in $ESOPT_POSTGRES_DIR (default /tmp/esopt-postgres-<port>),
# not the distribution's `main` cluster, so it neither needs nor disturbs a system server; the
# socket lives in that directory too. Port $ESOPT_POSTGRES_PORT (default 5433). Run as root it
# runs the server as the `postgres` user (the server refuses root); run as another user it runs
# as that user (then the binaries must already be installed). Database, user and password:
# esopt / esopt / esopt (loopback only; local socket: trust, TCP: scram-sha-256).
# Log: <dir>/server.log. On failure it prints one line `start_postgres: error: ...` on stderr
# and exits 1.
set -uo pipefail

PORT="${ESOPT_POSTGRES_PORT:-5433}"
DIR="${ESOPT_POSTGRES_DIR:-/tmp/esopt-postgres-$PORT}"
DB=esopt PGUSER_=esopt PASSWORD=esopt
WAIT_S="${ESOPT_POSTGRES_WAIT:-60}"
URL="postgresql://$PGUSER_:$PASSWORD@127.0.0.1:$PORT/$DB"

die() { echo "start_postgres: error: $*" >&2; exit 1; }
say() { echo "start_postgres: $*" >&2; }

# 1. Binaries: the newest installed major version; else apt-get install postgresql.
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
BIN="$(pg_bin)"
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
    if command -v pg_ctl >/dev/null 2>&1; then BIN="$(dirname "$(command -v pg_ctl)")"
    else
        [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed and installing it needs root (apt-get install postgresql)"
        command -v apt-get >/dev/null 2>&1 || die "apt-get not found (this script supports Debian/Ubuntu); install PostgreSQL"
        say "installing postgresql (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        : >/tmp/start_postgres.apt.log
        if [ -z "$(find /var/lib/apt/lists -maxdepth 0 -mmin -60 2>/dev/null)" ]; then  # not updated this hour
            apt-get update -qq >>/tmp/start_postgres.apt.log 2>&1 \
                || die "apt-get update failed (network?); see /tmp/start_postgres.apt.log"
        fi
        apt-get install -y -qq --no-install-recommends postgresql >>/tmp/start_postgres.apt.log 2>&1 \
            || die "apt-get install postgresql failed; see /tmp/start_postgres.apt.log"
        BIN="$(pg_bin)"
        [ -n "$BIN" ] && [ -x "$BIN/initdb" ] || die "postgresql installed but no initdb under /usr/lib/postgresql/*/bin"
    fi
fi

# 2. Who runs the server.
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "no 'postgres' user (the postgresql package creates it)"
    as_pg() { runuser -u postgres -- "$@"; }
    OWNER=postgres
else
    as_pg() { "$@"; }
    OWNER="$(id -un)"
fi

# Two callers at once (e.g. CI and a developer) must not both run initdb (the server itself
# must not inherit the lock: 9>&- below).
exec 9>"/tmp/esopt-postgres-$PORT.lock" || die "cannot open /tmp/esopt-postgres-$PORT.lock"
flock -w "$WAIT_S" 9 || die "another start_postgres on port $PORT did not finish in ${WAIT_S}s"

psql_() { as_pg "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR" -p "$PORT" -U postgres -d postgres "$@"; }
ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 2 >/dev/null 2>&1; }

if as_pg "$BIN/pg_ctl" -D "$DIR" status >/dev/null 2>&1 && ready; then
    say "server already up ($DIR, port $PORT)"
else
    # 3. A cluster of our own.
    if [ ! -s "$DIR/PG_VERSION" ]; then
        rm -rf "$DIR"
        mkdir -p "$DIR" && chown "$OWNER" "$DIR" && chmod 0700 "$DIR" || die "cannot create $DIR"
        as_pg "$BIN/initdb" -D "$DIR" -U postgres -E UTF8 --locale=C.UTF-8 --auth-local=trust \
            --auth-host=scram-sha-256 >"$DIR.initdb.log" 2>&1 \
            || die "initdb failed; see $DIR.initdb.log"
    fi
    # 4. Start it: loopback TCP only, the socket in the cluster directory.
    ready && die "port $PORT on 127.0.0.1 is taken by another server; set ESOPT_POSTGRES_PORT"
    as_pg "$BIN/pg_ctl" -D "$DIR" -l "$DIR/server.log" -w -t "$WAIT_S" \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR" start >/dev/null 2>&1 9>&- \
        || die "the server did not start; see $DIR/server.log"
    say "server started ($DIR, port $PORT, $("$BIN/postgres" -V | awk '{print "PostgreSQL", $3}'))"
fi

# 5. User and database (idempotent).
psql_ -tAc "SELECT 1 FROM pg_roles WHERE rolname='$PGUSER_'" | grep -q 1 \
    || psql_ -c "CREATE ROLE $PGUSER_ LOGIN PASSWORD '$PASSWORD'" || die "cannot create user $PGUSER_"
psql_ -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1 \
    || psql_ -c "CREATE DATABASE $DB OWNER $PGUSER_" || die "cannot create database $DB"
PGPASSWORD="$PASSWORD" "$BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U "$PGUSER_" -d "$DB" -tAc "SELECT 1" >/dev/null 2>&1 \
    || die "cannot log in as $PGUSER_ over 127.0.0.1:$PORT; see $DIR/server.log"
echo "$URL"
