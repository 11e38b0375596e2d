/*-------------------------------------------------------------------------
 *
 * rlock.c
 *		Module initialisation: settings, shared memory hooks and the
 *		registration of the background worker.
 *
 * rlock works only when loaded through shared_preload_libraries.  Loaded any
 * other way (CREATE EXTENSION in a server without it, for instance) it
 * defines nothing, and every SQL function refuses with a hint.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/rlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include "backend/backend.h"
#include "compat.h"
#include "shared/shared.h"

RLOCK_MODULE_MAGIC;

void		_PG_init(void);

/*---- settings ----*/
char	   *rlock_host = NULL;
int			rlock_port = 6379;
char	   *rlock_unix_socket = NULL;
int			rlock_database = 0;
char	   *rlock_username = NULL;
char	   *rlock_password_file = NULL;
char	   *rlock_key_prefix = NULL;
char	   *rlock_instance_name = NULL;
int			rlock_connect_timeout = 2000;
int			rlock_command_timeout = 3000;
int			rlock_watchdog_timeout = 30000;
int			rlock_handoff_limit = 4;
int			rlock_fair_wait_timeout = 300000;
int			rlock_max_key_length = 512;
int			rlock_max_locks = 4096;
int			rlock_max_locks_per_session = 256;
int			rlock_superuser_reserved_locks = 8;
int			rlock_verify_at_commit = RLOCK_VERIFY_ON;
int			rlock_deadlock_detection = RLOCK_DEADLOCK_LOCAL;

static const struct config_enum_entry deadlock_options[] = {
	{"off", RLOCK_DEADLOCK_OFF, false},
	{"local", RLOCK_DEADLOCK_LOCAL, false},
	{"global", RLOCK_DEADLOCK_GLOBAL, false},
	{NULL, 0, false}
};

static const struct config_enum_entry verify_options[] = {
	{"off", RLOCK_VERIFY_OFF, false},
	{"lease", RLOCK_VERIFY_LEASE, false},
	{"on", RLOCK_VERIFY_ON, false},
	{"always", RLOCK_VERIFY_ON, true},	/* 1.0's name for "on" */
	{"false", RLOCK_VERIFY_OFF, true},
	{"true", RLOCK_VERIFY_ON, true},
	{"no", RLOCK_VERIFY_OFF, true},
	{"yes", RLOCK_VERIFY_ON, true},
	{"0", RLOCK_VERIFY_OFF, true},
	{"1", RLOCK_VERIFY_ON, true},
	{NULL, 0, false}
};
int			rlock_verify_margin = 2000;
bool		rlock_client_tracking = true;
int			rlock_verify_window = 1;
int			rlock_tls = RLOCK_TLS_OFF;
char	   *rlock_tls_ca_file = NULL;
char	   *rlock_tls_cert_file = NULL;
char	   *rlock_tls_key_file = NULL;
char	   *rlock_tls_server_name = NULL;

static const struct config_enum_entry tls_options[] = {
	{"off", RLOCK_TLS_OFF, false},
	{"require", RLOCK_TLS_REQUIRE, false},
	{"verify-ca", RLOCK_TLS_VERIFY_CA, false},
	{"verify-full", RLOCK_TLS_VERIFY_FULL, false},
	{NULL, 0, false}
};

int			rlock_topology = RLOCK_TOPOLOGY_STANDALONE;
char	   *rlock_nodes = NULL;
int			rlock_cluster_pubsub = RLOCK_CLUSTER_PUBSUB_AUTO;
char	   *rlock_sentinel_master = NULL;
char	   *rlock_sentinel_username = NULL;
char	   *rlock_sentinel_password_file = NULL;
int			rlock_sentinel_tls = RLOCK_TLS_OFF;
int			rlock_sync_replicas = RLOCK_SYNC_AUTO;
static char *rlock_sync_replicas_text = NULL;
int			rlock_sync_timeout = 1000;
int			rlock_failover_timeout = 60000;

static const struct config_enum_entry cluster_pubsub_options[] = {
	{"auto", RLOCK_CLUSTER_PUBSUB_AUTO, false},
	{"sharded", RLOCK_CLUSTER_PUBSUB_SHARDED, false},
	{"classic", RLOCK_CLUSTER_PUBSUB_CLASSIC, false},
	{"both", RLOCK_CLUSTER_PUBSUB_BOTH, false},
	{NULL, 0, false}
};

static const struct config_enum_entry topology_options[] = {
	{"standalone", RLOCK_TOPOLOGY_STANDALONE, false},
	{"sentinel", RLOCK_TOPOLOGY_SENTINEL, false},
	{"cluster", RLOCK_TOPOLOGY_CLUSTER, false},
	{NULL, 0, false}
};

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void rlock_define_settings(void);
static bool rlock_check_nodes(char **newval, void **extra, GucSource source);
static bool rlock_check_sync_replicas(char **newval, void **extra,
									  GucSource source);
static void rlock_assign_sync_replicas(const char *newval, void *extra);
static void rlock_register_worker(void);
static void rlock_request_hook(void);
static void rlock_startup_hook(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	rlock_define_settings();

	if (IsBinaryUpgrade)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = rlock_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = rlock_startup_hook;
	rlock_utility_init();

	rlock_register_worker();
}

static void
rlock_define_settings(void)
{
	DefineCustomStringVariable("rlock.host",
							   "Host name or IP address of the Redis server.",
							   NULL,
							   &rlock_host,
							   "127.0.0.1",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.port",
							"TCP port of the Redis server.",
							NULL,
							&rlock_port,
							6379, 1, 65535,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.unix_socket",
							   "Unix-domain socket of the Redis server.",
							   "When set, it is used instead of rlock.host and rlock.port.",
							   &rlock_unix_socket,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.database",
							"Redis database number the locks live in.",
							NULL,
							&rlock_database,
							0, 0, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.username",
							   "Redis ACL user name.",
							   "Empty means the default user.",
							   &rlock_username,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.password_file",
							   "File holding the Redis password.",
							   "The first line of the file is the password.  Empty means no password.",
							   &rlock_password_file,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.key_prefix",
							   "Text put in front of every lock key.",
							   "Set by superusers, per role or database too; fixed in a session once it used rlock.",
							   &rlock_key_prefix,
							   "",
							   PGC_SUSET, 0,
							   rlock_check_key_prefix, NULL, NULL);

	DefineCustomStringVariable("rlock.instance_name",
							   "Name of this instance that other instances show for its locks.",
							   "Empty: cluster_name, else the host name and port.",
							   &rlock_instance_name,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.connect_timeout",
							"Time allowed for connecting to Redis.",
							"Requests that find no connection fail after this long.",
							&rlock_connect_timeout,
							2000, 1, RLOCK_MAX_TIMEOUT_MS,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.command_timeout",
							"Time allowed for Redis to answer a command.",
							"A connection that leaves a command unanswered for longer is dropped and made again.",
							&rlock_command_timeout,
							3000, 1, RLOCK_MAX_TIMEOUT_MS,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.watchdog_timeout",
							"Lease of locks taken without an explicit lease.",
							"The worker renews such leases every third of this time while they are held.",
							&rlock_watchdog_timeout,
							30000, 100, RLOCK_MAX_WATCHDOG_MS,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.handoff_limit",
							"Hand-offs in a row to this instance's own waiters while other clients wait too.",
							"After that many, the lock is freed for every client and this instance's waiters hold back briefly.  0 hands on for as long as this instance has waiters.",
							&rlock_handoff_limit,
							4, 0, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.fair_wait_timeout",
							"How long a fair lock's queue keeps the place of a session that waits without limit.",
							"Redisson's fairLockWaitTimeout, which its lock() uses: a waiter that is still queued after it counts as gone (its instance died).  A bounded wait queues for that wait.",
							&rlock_fair_wait_timeout,
							300000, 1000, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.max_key_length",
							"Maximum length of a lock key in bytes, prefix included.",
							NULL,
							&rlock_max_key_length,
							512, 16, 65535,
							PGC_POSTMASTER, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.max_locks",
							"Size of the shared table of held locks.",
							"One entry per key and session holding or taking it.",
							&rlock_max_locks,
							4096, 16, 1048576,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.max_locks_per_session",
							"Most keys one session may hold or be taking at once.",
							"Keeps one session from filling the shared table of held locks; set by superusers, per role or database too.",
							&rlock_max_locks_per_session,
							256, 1, 1048576,
							PGC_SUSET, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.superuser_reserved_locks",
							"Entries of the shared table of held locks kept for superusers.",
							"Other roles are refused the last ones, so that sessions of one role cannot take every entry and leave a superuser unable to lock or to look; as superuser_reserved_connections does for connections.",
							&rlock_superuser_reserved_locks,
							8, 0, 1048576,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("rlock.verify_at_commit",
							 "Checks before a commit that its transaction-scoped locks are still held.",
							 "A transaction whose lock was lost (its lease ran out, or it was removed) fails to commit with a serialization failure.  \"on\" asks Redis at every commit; \"lease\" asks unless Redis confirmed, on the current connection, a lease that outlasts rlock.verify_margin.  Set by superusers, per role or database too.",
							 &rlock_verify_at_commit,
							 RLOCK_VERIFY_ON, verify_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("rlock.deadlock_detection",
							 "Looks for deadlocks through a session's rlock wait.",
							 "After deadlock_timeout, and again every deadlock_timeout while it waits, a session waiting for an rlock looks for a cycle of waits through it: rlock waits and PostgreSQL lock waits of this instance's sessions.  It fails with 40P01 when it finds one twice.  \"global\" also has the worker look for cycles through sessions of other instances sharing the Redis, in a graph kept there.  \"off\" leaves such waits to lock_timeout.  Set by superusers, per role or database too.",
							 &rlock_deadlock_detection,
							 RLOCK_DEADLOCK_LOCAL, deadlock_options,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.verify_margin",
							"Lease a lock must have left when its transaction commits.",
							"The check before a commit extends shorter leases to this.  Set by superusers, per role or database too.",
							&rlock_verify_margin,
							2000, 0, RLOCK_MAX_TIMEOUT_MS,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("rlock.client_tracking",
							 "Has Redis announce changes of held locks, so that a commit need not ask.",
							 "With rlock.verify_at_commit = on, a commit whose locks nobody changed since Redis confirmed them, on a worker that heard from Redis within rlock.verify_window, does without the round trip.  Needs CLIENT TRACKING (Redis 6 and later, Valkey); where Redis refuses it, commits ask.",
							 &rlock_client_tracking,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.verify_window",
							"How recent the worker's news from Redis must be for a commit to trust client-side tracking.",
							"A change of a lock made within about this long before COMMIT may go unnoticed, as one made during the check's round trip may without tracking; 0 makes every commit ask.  Set by superusers, per role or database too.",
							&rlock_verify_window,
							1, 0, 1000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("rlock.tls",
							 "Whether to use TLS with Redis, and what to check.",
							 "\"require\" encrypts without checking the server's certificate; \"verify-ca\" checks that a trusted CA signed it; \"verify-full\" also checks that it names the server.  Not used over a Unix socket.",
							 &rlock_tls,
							 RLOCK_TLS_OFF, tls_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.tls_ca_file",
							   "File of the CA certificates that may sign Redis's certificate.",
							   "Empty means the system's trusted CAs.",
							   &rlock_tls_ca_file,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.tls_cert_file",
							   "File of the client certificate sent to Redis.",
							   "Empty means none.",
							   &rlock_tls_cert_file,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.tls_key_file",
							   "File of the private key of the client certificate.",
							   "Empty means the certificate file holds the key too.",
							   &rlock_tls_key_file,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.tls_server_name",
							   "Name every Redis data node's certificate must carry, also sent as SNI.",
							   "Empty means the host connected to: rlock.host, the primary a Sentinel names, or a node the cluster map names.",
							   &rlock_tls_server_name,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomEnumVariable("rlock.topology",
							 "How rlock finds the Redis primary.",
							 "\"standalone\" connects to rlock.host; \"sentinel\" asks the Redis Sentinels in rlock.nodes for the primary named rlock.sentinel_master and follows its failovers; \"cluster\" learns a Redis Cluster's slot map from the nodes in rlock.nodes and sends each key to its primary.",
							 &rlock_topology,
							 RLOCK_TOPOLOGY_STANDALONE, topology_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.nodes",
							   "Redis nodes to start from: host:port entries separated by commas.",
							   "With rlock.topology = sentinel, the Redis Sentinels; with cluster, nodes of the Redis Cluster.",
							   &rlock_nodes,
							   "",
							   PGC_SIGHUP, 0,
							   rlock_check_nodes, NULL, NULL);

	DefineCustomEnumVariable("rlock.cluster_pubsub",
							 "How unlock messages travel in a Redis Cluster.",
							 "\"auto\" uses sharded pub/sub (SSUBSCRIBE, SPUBLISH) when the cluster knows it, as Redisson 3.22 and later do; \"sharded\" and \"classic\" (SUBSCRIBE, PUBLISH) force one; \"both\" subscribes and publishes in both, for a fleet of old and new clients.",
							 &rlock_cluster_pubsub,
							 RLOCK_CLUSTER_PUBSUB_AUTO, cluster_pubsub_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.sentinel_master",
							   "Name under which the Redis Sentinels monitor the primary.",
							   NULL,
							   &rlock_sentinel_master,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.sentinel_username",
							   "ACL user name for the Redis Sentinels.",
							   "Empty means the default user.",
							   &rlock_sentinel_username,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.sentinel_password_file",
							   "File holding the password of the Redis Sentinels.",
							   "The first line of the file is the password.  Empty means no password.",
							   &rlock_sentinel_password_file,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomEnumVariable("rlock.sentinel_tls",
							 "Whether to use TLS with the Redis Sentinels, and what to check.",
							 "As rlock.tls, with the same certificate files; a Sentinel's certificate must name its host as rlock.nodes writes it.",
							 &rlock_sentinel_tls,
							 RLOCK_TLS_OFF, tls_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("rlock.sync_replicas",
							   "Replicas that must confirm a lock before it counts as taken.",
							   "\"auto\" waits for the replicas the primary reports connected and needs one of them; a number needs that many; \"off\" does not wait.",
							   &rlock_sync_replicas_text,
							   "auto",
							   PGC_SIGHUP, 0,
							   rlock_check_sync_replicas,
							   rlock_assign_sync_replicas, NULL);

	DefineCustomIntVariable("rlock.sync_timeout",
							"Time the replicas have to confirm a lock.",
							"An acquisition not confirmed within it is undone and fails.",
							&rlock_sync_timeout,
							1000, 1, RLOCK_MAX_TIMEOUT_MS,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("rlock.failover_timeout",
							"Longest a waiter keeps its place while its primary is out of reach behind Sentinels or in a Redis Cluster.",
							"A session that was told the lock is busy waits this long for a failover to name a reachable primary; everything else fails after rlock.connect_timeout, as with a single server.",
							&rlock_failover_timeout,
							60000, 0, RLOCK_MAX_TIMEOUT_MS,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("rlock");
}

static bool
rlock_check_nodes(char **newval, void **extra, GucSource source)
{
	RlockNodeAddr nodes[RLOCK_MAX_NODES];
	char		error[256];

	if (rlock_parse_nodes(*newval, nodes, RLOCK_MAX_NODES, error,
						  sizeof(error)) < 0)
	{
		GUC_check_errdetail("%s", error);
		return false;
	}
	return true;
}

/* "off", "auto" or a number of replicas, into an int for the assign hook */
static bool
rlock_check_sync_replicas(char **newval, void **extra, GucSource source)
{
	const char *v = *newval;
	int		   *parsed;
	int			n;

	if (pg_strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0)
		n = RLOCK_SYNC_OFF;
	else if (pg_strcasecmp(v, "auto") == 0)
		n = RLOCK_SYNC_AUTO;
	else
	{
		char	   *end;
		long		l;

		errno = 0;
		l = strtol(v, &end, 10);
		if (!isdigit((unsigned char) v[0]) || *end != '\0' || errno != 0 || l < 0 ||
			l > RLOCK_SYNC_MAX)
		{
			GUC_check_errdetail("Use \"off\", \"auto\" or a number of replicas from 1 to %d.",
								RLOCK_SYNC_MAX);
			return false;
		}
		n = (int) l;
	}
	/* the server frees extra itself (compat.h) */
	parsed = rlock_guc_malloc(sizeof(int));
	if (parsed == NULL)
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		return false;
	}
	*parsed = n;
	*extra = parsed;
	return true;
}

static void
rlock_assign_sync_replicas(const char *newval, void *extra)
{
	rlock_sync_replicas = *(int *) extra;
}

#ifdef RLOCK_SANITIZE

/*
 * The sanitizer runtimes come in with rlock.so (make SANITIZE=1), not
 * first in the process as they would like, and PostgreSQL overwrites the
 * environment area their options are read from with the process title;
 * so a sanitized build carries its options itself.  Reports go to the
 * server log; the first one ends the process.
 */
extern PGDLLEXPORT const char *__asan_default_options(void);
extern PGDLLEXPORT const char *__ubsan_default_options(void);

const char *
__asan_default_options(void)
{
	return "verify_asan_link_order=0:detect_leaks=0:abort_on_error=1";
}

const char *
__ubsan_default_options(void)
{
	return "print_stacktrace=1:halt_on_error=1";
}

#endif							/* RLOCK_SANITIZE */

static void
rlock_register_worker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "rlock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "rlock_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "rlock worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "rlock worker");
	RegisterBackgroundWorker(&worker);
}

static void
rlock_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	rlock_shmem_request();
}

static void
rlock_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	rlock_shmem_startup();
}
