#!/usr/bin/env bash
# Installs PostgreSQL from Debian's packages when missing and starts a
# throwaway cluster on a temporary directory, listening on loopback only,
# owned by an unprivileged user. Prints the DSN on stdout as its last line.
#
#   eval "$(.ci/postgres.sh)"   # sets HYMICAL_TEST_POSTGRES_DSN and PGDATA_DIR
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && { echo "$d"; return 0; }
	done
	return 1
}

if ! bindir=$(find_bindir); then
	log "PostgreSQL not found; installing from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq postgresql >&2
	bindir=$(find_bindir)
fi

run_as=()
if [ "$(id -u)" = 0 ]; then
	id -u hymicalpg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin hymicalpg
	run_as=(runuser -u hymicalpg --)
fi

dir=$(mktemp -d /tmp/hymical-pg.XXXXXX)
chmod 755 "$dir"
[ ${#run_as[@]} -gt 0 ] && chown hymicalpg "$dir"
port=${HYMICAL_PG_PORT:-$(( 20000 + RANDOM % 20000 ))}

"${run_as[@]}" "$bindir/initdb" -D "$dir/data" -U hymical --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
	|| { cat "$dir/initdb.log" >&2; exit 1; }
# Throwaway test cluster: durability traded for speed, loopback only.
# autovacuum looks every second, not every minute: every test and bench
# phase starts on an empty database that grows in seconds, and until the
# first ANALYZE its cached plans are the ones made for an empty table.
"${run_as[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
	-o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c autovacuum_naptime=1s" \
	start >&2 || { cat "$dir/server.log" >&2; exit 1; }

log "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $dir/data"
echo "export PGDATA_DIR=$dir/data PG_BINDIR=$bindir HYMICAL_TEST_POSTGRES_DSN='postgres://hymical@127.0.0.1:$port/postgres?sslmode=disable'"
