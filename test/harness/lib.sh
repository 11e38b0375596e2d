# Shell functions shared by the test, demo and benchmark drivers.
#
# They install what is missing on Debian 12, build and install rlock, pick
# an unprivileged user (initdb refuses to run as root), find free loopback
# ports and start throw-away Redis and PostgreSQL servers that the caller's
# EXIT trap stops.

RLOCK_PACKAGES="make gcc postgresql-15 postgresql-client-15 postgresql-server-dev-15
libhiredis-dev libssl-dev openssl redis-server redis-sentinel libipc-run-perl clang python3-psycopg2 gdb
libclang-rt-14-dev"

# The interoperability tests' Java service: Redisson from Maven Central.
RLOCK_INTEROP_PACKAGES="openjdk-17-jdk-headless maven"

# PG_BINDIR from the environment picks another PostgreSQL 15 (a private
# copy that pg_config in PATH installs into)
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}

log() {
	printf '%s\n' "== $*" >&2
}

die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# Install the Debian packages in "$@" that are not installed yet.
need_packages() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] ||
		die "missing Debian packages: ${missing[*]} (install them as root)"
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Make sure command $1 exists, installing Debian packages $2... if not: for
# tools a machine may have from elsewhere (Node.js from its own packages
# brings npm, which Debian's npm package would conflict with).
need_command() {
	local cmd=$1
	shift
	command -v "$cmd" >/dev/null && return 0
	need_packages "$@"
}

# Build rlock in $1 and install it into the PostgreSQL found by pg_config,
# with make arguments "${@:2}".  With SANITIZE=1, with AddressSanitizer, UBSan and rlock's Asserts (and
# no JIT bitcode); a change of mode rebuilds everything.
build_and_install() {
	local dir=$1 mode=${SANITIZE:-0} args=()
	shift
	[ "$mode" = 1 ] && args=(SANITIZE=1 with_llvm=no)
	args+=("$@")
	mode="$mode $(pg_config_of "$@") $*"
	if [ "$(cat "$dir/.build-mode" 2>/dev/null)" != "$mode" ]; then
		make -s -C "$dir" "${args[@]}" clean >/dev/null
		echo "$mode" >"$dir/.build-mode"
	fi
	log "building and installing rlock${args:+ (${args[*]})}"
	make -s -C "$dir" "${args[@]}" >/dev/null
	make -s -C "$dir" "${args[@]}" install >/dev/null
}

# The pg_config a make with arguments "$@" uses.
pg_config_of() {
	local a pg=pg_config
	for a in "$@"; do
		case $a in PG_CONFIG=*) pg=${a#PG_CONFIG=} ;; esac
	done
	command -v "$pg" || echo "$pg"
}

# The user servers run as: ourselves, or (as root) an unprivileged user
# made for the purpose.
pick_run_user() {
	if [ "$(id -u)" -ne 0 ]; then
		RUN_USER=$(id -un)
		return
	fi
	RUN_USER=rlocktest
	id -u "$RUN_USER" >/dev/null 2>&1 ||
		useradd --system --create-home --shell /bin/bash "$RUN_USER"
}

# Run a command as RUN_USER.
as_run_user() {
	if [ "$(id -un)" = "$RUN_USER" ]; then
		"$@"
	else
		runuser -u "$RUN_USER" -- "$@"
	fi
}

# A scratch directory owned by RUN_USER.
make_scratch() {
	local dir
	dir=$(mktemp -d "${TMPDIR:-/tmp}/rlock-$1.XXXXXX")
	chmod 755 "$dir"
	[ "$(id -un)" = "$RUN_USER" ] || chown "$RUN_USER" "$dir"
	printf '%s\n' "$dir"
}

# A TCP port on 127.0.0.1 that nobody listens on right now.
free_port() {
	perl -MIO::Socket::INET -e \
		'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1",
		 LocalPort => 0, Proto => "tcp")->sockport, "\n"'
}

# start_redis DIR PORT [OPTION...]: a throw-away redis-server without
# persistence, with more redis-server options if given.
start_redis() {
	local dir=$1 port=$2 i
	shift 2
	as_run_user redis-server --port "$port" --bind 127.0.0.1 \
		--save '' --appendonly no --dir "$dir" \
		--daemonize yes --pidfile "$dir/redis-$port.pid" \
		--logfile "$dir/redis-$port.log" "$@" ||
		die "could not start redis-server on port $port"
	for i in $(seq 1 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	die "redis-server on port $port did not answer"
}

# stop_redis DIR PORT: stop it and wait until it is gone.
stop_redis() {
	local pidfile="$1/redis-$2.pid" pid i
	[ -f "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || true
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$pidfile"
}

# start_pg DIR PORT CONF...: initdb and start a PostgreSQL instance in DIR
# listening on PORT (loopback and a socket in DIR), with extra settings.
start_pg() {
	local dir=$1 port=$2
	shift 2
	as_run_user "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres \
		>"$dir/initdb.log" 2>&1 || die "initdb failed (see $dir/initdb.log)"
	{
		echo "port = $port"
		echo "listen_addresses = '127.0.0.1'"
		echo "unix_socket_directories = '$dir'"
		echo "shared_preload_libraries = 'rlock'"
		printf '%s\n' "$@"
	} >>"$dir/data/postgresql.conf"
	as_run_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" \
		-w start >/dev/null || die "PostgreSQL did not start (see $dir/postgres.log)"
}

# stop_pg DIR
stop_pg() {
	[ -f "$1/data/postmaster.pid" ] || return 0
	as_run_user "$PG_BINDIR/pg_ctl" -D "$1/data" -m immediate stop \
		>/dev/null 2>&1 || true
}
