/*-------------------------------------------------------------------------
 *
 * conn.c
 *		The worker's Redis connections: their life cycle, reading and
 *		writing, the dispatch of replies, and the one place the worker
 *		sleeps.
 *
 * A server has two connections: one for commands and one for pub/sub (a
 * subscribed connection cannot run scripts).  Each is a non-blocking
 * socket with a transport (plain or TLS, see transport.c and tls.c), an
 * output buffer, a reader (reply.c) and the list of its commands in send
 * order.  All sockets sit in one WaitEventSet with the worker's latch and
 * postmaster death; PostgreSQL 15 cannot remove an event from a set, so
 * the set is built again whenever a socket comes or goes.
 *
 * Life of a connection: DOWN -> (RESOLVING) -> CONNECTING -> (SECURING,
 * the TLS handshake) -> HANDSHAKE (AUTH, SELECT, names, scripts: see
 * handshake.c) -> READY, and back to DOWN on any failure.  Connecting and
 * the handshakes must end within rlock.connect_timeout; a READY
 * connection whose oldest command has waited longer than
 * rlock.command_timeout is dropped, and so is one that has had part of a
 * reply for that long, whether a command waits or not.  Reconnection
 * uses exponential back-off from 50 ms, capped at one second; the
 * back-off starts over only after a connection stayed up for a while, so
 * a server that accepts connections and then drops them is not hammered.
 * Each outage is logged once, and its end once.
 *
 * Replies are dispatched in order: each answers the oldest command of its
 * connection, and must fit the shape that command expects (redis.h).  A
 * reply with no command, one that does not fit, a push of an unexpected
 * shape, or bytes the reader refuses (reply.c, which also keeps the
 * replies of all connections within one budget) is a protocol violation:
 * the connection is marked failed and dropped at the next tick, and every
 * command on it is answered with NULL, which its sender treats like any
 * lost reply.  Each cause is logged the first time only.
 *
 * Reply functions and event handlers never close a connection; closing
 * happens at the top of the loop (rlock_redis_tick), and in
 * rlock_redis_reload(), where no reply is being handled.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "redis/redis_int.h"

#define RLOCK_BACKOFF_MIN_MS	50
#define RLOCK_BACKOFF_MAX_MS	1000

/* A connection up for this long counts as stable when it is lost: the
 * next attempt is made at once */
#define RLOCK_STABLE_MS			1000

/* A connection lost after being up for less than this is part of the
 * same outage for the log (a stalled Redis times out each new connection
 * in turn): said once more as failing again, then no more */
#define RLOCK_LOG_STABLE_MS		60000

/* Bytes read per call, and calls per connection per wake-up */
#define RLOCK_READ_CHUNK		(64 * 1024)
#define RLOCK_READS_PER_WAKE	16

/* The sync connection asks ROLE for the replicas this often */
#define RLOCK_ROLE_INTERVAL_MS	1000
/* the command connection's ROLE, while it looks out for replicas */
#define RLOCK_ROLE_LOOKOUT_MS	10000

/* The output buffer is compacted once this much of it was written */
#define RLOCK_OUT_COMPACT		(64 * 1024)

static const RlockConnEvents *events;
static RlockServer *server = NULL;	/* the data node: the primary */
static RlockConn *conns[RLOCK_NUSES];	/* by RlockConnUse; the data
										 * ones unused in a cluster */

/* Every connection ever made, for the loops (router.c adds a Redis
 * Cluster's) */
static RlockConn **all = NULL;
static int	nall = 0;
static int	maxall = 0;

/* Role names for messages, by RlockConnUse */
static const char *const conn_roles[RLOCK_NUSES] = {
	"command", "subscriber", "sync", "Sentinel", "Sentinel watch", "cluster"
};

/* the topology these connections were made for, and its nodes */
static int	configured_topology = -1;
static char *configured_nodes = NULL;

static WaitEventSet *wait_set = NULL;
static bool wait_set_stale = true;

/* The wait event the worker shows while it waits (compat.h) */
static uint32 wait_event = 0;
static char *read_buf;

/* Send a PING on the idle command connection (rlock_redis_keepalive) */
static bool keepalive = false;

/* Replicas confirming acquisitions: the latest WAIT's answer (-1: none
 * yet), the latest acquisition undone for want of them */
static int	sync_acks = -1;
static char sync_failure[RLOCK_DETAIL_LEN];
static TimestampTz sync_failure_at = 0;

static void conn_close(RlockConn *conn, const char *reason, bool first_cause);
static bool conn_wanted(RlockConn *conn, const char **why);

/*---- status ----*/

/*
 * An acquisition was undone: too few replicas confirmed it.  rlock_status()
 * shows the latest.
 */
void
rlock_redis_sync_failed(const char *detail)
{
	strlcpy(sync_failure, detail, sizeof(sync_failure));
	sync_failure_at = GetCurrentTimestamp();
	rlock_redis_status_touch();
}

/*
 * What an acquisition waits for now, for rlock_status(): "off", the
 * number of replicas, or why nothing.
 */
static void
status_sync_wait(char *buf, size_t size, RlockConn *sync)
{
	RlockConn  *cmd = sync->group[RLOCK_USE_COMMAND];
	int			ask;
	int			need;

	if (rlock_sync_replicas == RLOCK_SYNC_OFF)
		strlcpy(buf, "off", size);
	else if (rlock_redis_cluster())
		snprintf(buf, size, rlock_sync_replicas > 0 ?
				 "%d replicas of the key's primary" :
				 "1 replica of the key's primary, where it has one",
				 rlock_sync_replicas);
	else if ((need = rlock_redis_sync_need(sync, &ask)) > 0)
		snprintf(buf, size, need == 1 ? "%d replica" : "%d replicas", need);
	else if (cmd->replicas_refused || sync->replicas_refused)
		strlcpy(buf, "nothing: replicas not known (ROLE and INFO refused)",
				size);
	else if (cmd->replicas < 0)
		strlcpy(buf, "nothing: replicas not known yet", size);
	else
		strlcpy(buf, "nothing: no replica", size);
}

/*
 * Copy the state of the connections into shared memory, if it changed.
 * "channels" is the number of channels the worker is subscribed to.
 */
void
rlock_redis_status_publish(int channels)
{
	RlockWorkerStatus *st = &rlock_shared->status;
	RlockConn  *cmd = conns[RLOCK_USE_COMMAND];
	RlockConn  *sub = conns[RLOCK_USE_SUBSCRIBER];
	RlockConn  *sync = conns[RLOCK_USE_SYNC];
	const char *why;
	int			sync_state = conn_wanted(sync, &why) ||
		sync->state != RLOCK_CONN_DOWN ? (int) sync->state : -1;

	if (!rlock_redis_status_changed() && !rlock_redis_cluster() &&
		st->cmd_state == (int) cmd->state &&
		st->sub_state == (int) sub->state && st->channels == channels &&
		st->sync_state == sync_state)
		return;
	if (!rlock_redis_status_changed() && rlock_redis_cluster() &&
		st->channels == channels)
	{
		/* the states of many connections: compare what would be shown */
		RlockWorkerStatus now;

		rlock_router_status(&now);
		if (now.cmd_state == st->cmd_state && now.sub_state == st->sub_state &&
			now.sync_state == st->sync_state)
			return;
	}
	rlock_status_begin_write();
	rlock_redis_status_take(st);
	st->cmd_state = cmd->state;
	st->sub_state = sub->state;
	st->cmd_since = cmd->since;
	st->sub_since = sub->since;
	strlcpy(st->address, server->address, sizeof(st->address));
	st->channels = channels;
	st->topology = rlock_topology;
	st->sync_state = sync_state;
	st->replicas = sync->state == RLOCK_CONN_READY && sync->replicas >= 0 ?
		sync->replicas : cmd->replicas;
	status_sync_wait(st->sync_wait, sizeof(st->sync_wait), sync);
	st->sync_acks = sync_acks;
	strlcpy(st->sync_failure, sync_failure, sizeof(st->sync_failure));
	st->sync_failure_at = sync_failure_at;
	rlock_sentinel_status(st);
	st->cluster_primaries = 0;
	st->cluster_map_known = false;
	st->cluster_node[0] = '\0';
	st->cluster_pubsub = rlock_redis_pubsub();
	if (rlock_redis_cluster())
	{
		st->replicas = -1;
		rlock_router_status(st);
	}
	rlock_status_end_write();
}

/*---- settings and setup ----*/

/*
 * The data node from the settings.  With Sentinel, its address comes
 * from the Sentinels later (rlock_redis_master_moved); in a Redis Cluster
 * it is not used (router.c has a server per primary).
 */
static void
server_configure(RlockServer *srv)
{
	if (rlock_topology == RLOCK_TOPOLOGY_STANDALONE)
		rlock_server_configure(srv, rlock_host, rlock_port, rlock_unix_socket);
	else
	{
		rlock_server_configure(srv, "", 0, "");
		if (rlock_topology == RLOCK_TOPOLOGY_CLUSTER)
			strlcpy(srv->address, "(Redis Cluster)", sizeof(srv->address));
		else
			snprintf(srv->address, sizeof(srv->address),
					 "(the primary \"%s\", not named yet)",
					 rlock_sentinel_master);
	}
	configured_topology = rlock_topology;
	if (configured_nodes != NULL)
		pfree(configured_nodes);
	configured_nodes = rlock_redis_strdup(rlock_nodes);
}

static bool
server_settings_changed(RlockServer *srv)
{
	if (rlock_sentinel_settings_changed() ||
		configured_topology != rlock_topology)
		return true;
	if (rlock_topology == RLOCK_TOPOLOGY_CLUSTER &&
		strcmp(configured_nodes, rlock_nodes) != 0)
		return true;
	if (rlock_topology == RLOCK_TOPOLOGY_STANDALONE &&
		(strcmp(srv->host, rlock_host) != 0 ||
		 srv->port != rlock_port ||
		 strcmp(srv->unix_socket, rlock_unix_socket) != 0))
		return true;
	return srv->database != rlock_database ||
		strcmp(srv->username, rlock_username) != 0 ||
		strcmp(srv->password_file, rlock_password_file) != 0 ||
		srv->tls != rlock_tls ||
		strcmp(srv->tls_ca_file, rlock_tls_ca_file) != 0 ||
		strcmp(srv->tls_cert_file, rlock_tls_cert_file) != 0 ||
		strcmp(srv->tls_key_file, rlock_tls_key_file) != 0 ||
		strcmp(srv->tls_server_name, rlock_tls_server_name) != 0;
}

/*
 * Forget the history of a connection: connect at once, log afresh.
 */
static void
conn_start_over(RlockConn *conn)
{
	conn->retry_at = 0;
	conn->backoff_ms = RLOCK_BACKOFF_MIN_MS;
	conn->outage_logged = false;
	conn->ready_logged = false;
	conn->flap_logged = false;
}

RlockConn *
rlock_conn_create(RlockServer *srv, RlockConnUse use)
{
	RlockConn  *conn = MemoryContextAllocZero(rlock_redis_context,
											  sizeof(RlockConn));

	conn->role = conn_roles[use];
	conn->use = use;
	conn->subscriber = (use == RLOCK_USE_SUBSCRIBER || use == RLOCK_USE_WATCH);
	conn->server = srv;
	conn->group = conns;
	conn->replicas = -1;
	conn->cxt = AllocSetContextCreate(rlock_redis_context,
									  "rlock connection",
									  ALLOCSET_DEFAULT_SIZES);
	conn->state = RLOCK_CONN_DOWN;
	conn->sock = PGINVALID_SOCKET;
	conn->since = GetCurrentTimestamp();
	conn->pos = -1;
	conn_start_over(conn);
	dlist_init(&conn->inflight);
	snprintf(conn->error, sizeof(conn->error), "not connected yet");

	if (nall == maxall)
	{
		maxall = Max(16, 2 * maxall);
		all = all == NULL ?
			MemoryContextAlloc(rlock_redis_context, sizeof(RlockConn *) * maxall) :
			repalloc(all, sizeof(RlockConn *) * maxall);
	}
	all[nall++] = conn;
	wait_set_stale = true;
	return conn;
}

/*
 * A Redis Cluster node, with its data connections.
 */
RlockNode *
rlock_node_create(const char *host, int port, int index)
{
	RlockNode  *n = MemoryContextAllocZero(rlock_redis_context,
										   sizeof(RlockNode));
	int			i;

	n->index = index;
	rlock_server_configure_node(&n->server, host, port);
	for (i = 0; i < RLOCK_NDATA; i++)
	{
		n->conn[i] = rlock_conn_create(&n->server, i);
		n->conn[i]->node = n;
		n->conn[i]->group = n->conn;
	}
	return n;
}

/*
 * Has a node nothing going on: no connection, no command?
 */
bool
rlock_node_idle(RlockNode *node)
{
	int			i;

	for (i = 0; i < RLOCK_NDATA; i++)
	{
		if (node->conn[i]->state != RLOCK_CONN_DOWN ||
			!dlist_is_empty(&node->conn[i]->inflight))
			return false;
	}
	return true;
}

/*
 * Reuse an idle node for another address.
 */
void
rlock_node_move(RlockNode *node, const char *host, int port)
{
	int			i;

	rlock_server_set_address(&node->server, host, port);
	node->note_at = 0;
	for (i = 0; i < RLOCK_NDATA; i++)
	{
		conn_start_over(node->conn[i]);
		node->conn[i]->fence_id = 0;
		node->conn[i]->fence_run_id[0] = '\0';
		node->conn[i]->ever_ready = false;
	}
}

/*
 * The connection settings changed: a node takes them, keeping its address.
 */
void
rlock_node_reconfigure(RlockNode *node)
{
	char		host[RLOCK_CLUSTER_HOST_LEN];
	int			port = node->server.port;

	strlcpy(host, node->server.host, sizeof(host));
	rlock_server_forget(&node->server);
	rlock_server_configure_node(&node->server, host, port);
}

/*
 * Set up the connections of the server the settings name.  "ev" says
 * what to tell the worker about them.
 */
void
rlock_redis_start(const RlockConnEvents *ev)
{
	int			i;

	events = ev;
	rlock_redis_context = AllocSetContextCreate(TopMemoryContext,
												"rlock redis",
												ALLOCSET_DEFAULT_SIZES);
	read_buf = MemoryContextAlloc(rlock_redis_context, RLOCK_READ_CHUNK);
	server = MemoryContextAllocZero(rlock_redis_context, sizeof(RlockServer));
	server_configure(server);
	rlock_sentinel_configure();
	for (i = 0; i < RLOCK_USE_CLUSTER; i++)
		conns[i] = rlock_conn_create(i == RLOCK_USE_SENTINEL ||
									 i == RLOCK_USE_WATCH ?
									 rlock_sentinel_server() : server, i);
	rlock_router_configure();
	conns[RLOCK_USE_CLUSTER] = rlock_router_topology_conn();
}

/*
 * The command connection for commands without a key: in a Redis Cluster,
 * a ready primary's.
 */
RlockConn *
rlock_redis_command_conn(void)
{
	if (rlock_redis_cluster())
		return rlock_router_any();
	return conns[RLOCK_USE_COMMAND];
}

/*
 * The command connection for a key: the one, or in a Redis Cluster the
 * key's slot's primary's (which may be a connection that is never ready,
 * when no primary serves the slot; rlock_conn_error() says so).
 */
RlockConn *
rlock_redis_route(const char *key, int keylen)
{
	if (rlock_redis_cluster())
		return rlock_router_route(key, keylen, RLOCK_USE_COMMAND);
	return conns[RLOCK_USE_COMMAND];
}

/*
 * The subscriber connection for a channel: in a Redis Cluster the
 * channel's slot's primary's, which sharded pub/sub needs and Redisson
 * uses for classic pub/sub too.
 */
RlockConn *
rlock_redis_subscriber_for(const char *channel, int len)
{
	if (rlock_redis_cluster())
		return rlock_router_route(channel, len, RLOCK_USE_SUBSCRIBER);
	return conns[RLOCK_USE_SUBSCRIBER];
}

bool
rlock_conn_is_subscriber(RlockConn *conn)
{
	return conn->use == RLOCK_USE_SUBSCRIBER;
}

bool
rlock_conn_is_sync(RlockConn *conn)
{
	return conn->use == RLOCK_USE_SYNC;
}

const char *
rlock_conn_address(RlockConn *conn)
{
	return conn->server->address;
}

/*
 * The sync connection for a key: the one, or in a Redis Cluster the key's
 * slot's primary's.
 */
RlockConn *
rlock_redis_sync_for(const char *key, int keylen)
{
	if (rlock_redis_cluster())
		return rlock_router_route(key, keylen, RLOCK_USE_SYNC);
	return conns[RLOCK_USE_SYNC];
}

/*
 * Is the connection to be made (again) when down: used, or owing a fence?
 */
bool
rlock_redis_conn_wanted(RlockConn *conn)
{
	const char *why;

	return conn_wanted(conn, &why);
}

/*
 * A place for the worker's own state of a connection.
 */
void	  **
rlock_conn_worker_data(RlockConn *conn)
{
	return &conn->worker_data;
}

RlockConn *
rlock_redis_conn(RlockConnUse use)
{
	return conns[use];
}

/*
 * How many replicas must confirm an acquisition now, and (*ask) how many
 * WAIT asks for; 0 when acquisitions are not synced.  With "auto", one,
 * as Redisson needs, when the primary listed any in its latest ROLE (or
 * INFO).  Redisson asks WAIT for every replica and so waits for the
 * slowest, up to the timeout, each time one lags; asking for one, WAIT
 * answers as soon as the first confirms.
 */
int
rlock_redis_sync_need(RlockConn *sync, int *ask)
{
	RlockConn  *cmd = sync->group[RLOCK_USE_COMMAND];
	int			replicas;

	*ask = 0;
	if (rlock_sync_replicas == RLOCK_SYNC_OFF)
		return 0;
	if (rlock_sync_replicas > 0)
	{
		*ask = rlock_sync_replicas;
		return rlock_sync_replicas;
	}
	replicas = (sync->state == RLOCK_CONN_READY && sync->replicas >= 0) ?
		sync->replicas : cmd->replicas;
	if (replicas <= 0)
		return 0;
	*ask = 1;
	return 1;
}

/*
 * Was the sync connection lost with acquisitions on the wire, and no new
 * one made since to close it on the server?
 */
bool
rlock_redis_sync_fence_owed(RlockConn *sync)
{
	return sync->fence_owed;
}

/*
 * WAIT said how many replicas confirmed: more than ROLE listed means
 * replicas came since; take the count at once (fewer is left to the next
 * ROLE: a replica may just be slow).
 */
void
rlock_redis_sync_acks(RlockConn *sync, int acks)
{
	if (acks != sync_acks)
	{
		sync_acks = acks;
		rlock_redis_status_touch();
	}
	if (acks > sync->replicas && sync->state == RLOCK_CONN_READY)
	{
		sync->replicas = acks;
		rlock_redis_status_touch();
	}
}

/*
 * The Sentinels name another primary (or the first one): point the data
 * connections at it.  Those up now are dropped at the next tick and made
 * again to the new address at once.
 */
void
rlock_redis_master_moved(const char *host, int port)
{
	int			i;

	rlock_server_set_address(server, host, port);
	for (i = RLOCK_USE_COMMAND; i <= RLOCK_USE_SYNC; i++)
	{
		RlockConn  *conn = conns[i];

		if (conn->state != RLOCK_CONN_DOWN && !conn->failed)
		{
			conn->quiet_drop = true;	/* sentinel.c logged the move */
			rlock_conn_give_up(conn, "the Sentinels named another primary");
		}
		conn_start_over(conn);
	}
	rlock_redis_status_touch();
}

/*
 * After a configuration reload: if any connection setting changed, drop
 * both connections and connect again with the new settings at once.
 * Certificate and key files are read again for every new TLS connection
 * after a reload, changed or not.
 */
void
rlock_redis_reload(void)
{
	int			i;
	const char *why;

	/* not a connection setting: only whether the sync connections are used */
	rlock_redis_status_touch();
	for (i = 0; i < nall; i++)
	{
		if (all[i]->use == RLOCK_USE_SYNC && !conn_wanted(all[i], &why) &&
			all[i]->state != RLOCK_CONN_DOWN)
		{
			all[i]->quiet_drop = true;
			conn_close(all[i], "rlock.sync_replicas is off", true);
		}
	}

	rlock_tls_reset();
	if (!server_settings_changed(server))
		return;

	ereport(LOG,
			(errmsg("rlock connection settings changed, reconnecting to Redis")));
	for (i = 0; i < nall; i++)
	{
		all[i]->quiet_drop = true;	/* logged above, not a failure */
		conn_close(all[i], "connection settings changed", true);
	}
	rlock_server_forget(server);
	server_configure(server);
	rlock_sentinel_configure();
	rlock_router_configure();
	conns[RLOCK_USE_SENTINEL]->server = rlock_sentinel_server();
	conns[RLOCK_USE_WATCH]->server = rlock_sentinel_server();
	rlock_redis_status_touch();
	for (i = 0; i < nall; i++)
		conn_start_over(all[i]);
}

/*---- state of a connection, for the worker ----*/

/*
 * Can the connection take a command now: is it up, and is Redis reading
 * what it was sent?
 */
static bool
conn_writable(RlockConn *conn)
{
	return !conn->failed && conn->state >= RLOCK_CONN_HANDSHAKE &&
		conn->out.len - conn->out_pos <= RLOCK_OUT_MAX;
}

/*
 * Can the connection take the worker's commands now?
 */
bool
rlock_conn_ready(RlockConn *conn)
{
	return conn->state == RLOCK_CONN_READY && conn_writable(conn);
}

/*
 * Why the connection is not ready, for messages.
 */
const char *
rlock_conn_error(RlockConn *conn)
{
	return conn->error[0] ? conn->error : "not connected";
}

/*---- connection life cycle ----*/

/*
 * Log the first failure of an outage; later ones would only repeat it.
 */
static void
conn_log_failure(RlockConn *conn, bool was_ready)
{
	if (conn->outage_logged)
		return;
	conn->outage_logged = true;
	conn->ready_logged = false;
	if (was_ready)
		ereport(LOG,
				(errmsg("rlock lost its %s connection to Redis at %s: %s",
						conn->role, conn->server->address, conn->error)));
	else
		ereport(LOG,
				(errmsg("rlock could not open its %s connection to Redis at %s: %s",
						conn->role, conn->server->address, conn->error)));
}

/*
 * Release the socket and what goes with it.
 */
static void
conn_release(RlockConn *conn)
{
	if (conn->tls != NULL)
		conn->transport->close(conn);
	if (conn->sock != PGINVALID_SOCKET)
	{
		rlock_socket_close(conn);
		wait_set_stale = true;
	}
	rlock_reader_free(conn->reader);
	conn->reader = NULL;
	conn->partial_since = 0;
	/* the output buffer, the reader's replies, the TLS state */
	MemoryContextReset(conn->cxt);
	conn->out.data = NULL;
	conn->out.len = 0;
	conn->out_pos = 0;
	conn->pos = -1;
	conn->read_more = false;
}

/*
 * The connection is gone, or never came.  Answer what was on the wire
 * with NULL, tell the worker, and schedule the next attempt.
 */
static void
conn_closed(RlockConn *conn)
{
	bool		was_ready = (conn->state == RLOCK_CONN_READY);
	bool		quiet = conn->quiet_drop;
	TimestampTz now = GetCurrentTimestamp();

	conn_release(conn);
	conn->state = RLOCK_CONN_DOWN;
	/* a host name is resolved again for the next connection: DNS may
	 * point elsewhere now (a failover behind a name) */
	conn->server->resolved[0] = '\0';
	if (was_ready)
		conn->since = now;		/* an outage begins */
	conn->handshake = 0;
	conn->failed = false;
	conn->quiet_drop = false;
	conn->scripts_loaded_at = 0;
	conn->scripts_seq = 0;
	conn->sends = 0;

	while (!dlist_is_empty(&conn->inflight))
	{
		RlockCmd   *cmd = dlist_container(RlockCmd, node,
										  dlist_pop_head_node(&conn->inflight));

		/* a write left on the wire may still run, until a fence */
		if (cmd->writes_locks && conn->use == RLOCK_USE_SYNC)
			conn->fence_owed = true;
		rlock_conn_answer(conn, cmd, NULL);
	}

	/* a connection lost after a stable while is tried again at once */
	if (was_ready &&
		now >= TimestampTzPlusMilliseconds(conn->ready_at, RLOCK_STABLE_MS))
		conn->backoff_ms = RLOCK_BACKOFF_MIN_MS;
	/* and after a longer while it starts a new outage in the log */
	if (was_ready &&
		now >= TimestampTzPlusMilliseconds(conn->ready_at, RLOCK_LOG_STABLE_MS))
	{
		conn->outage_logged = false;
		conn->flap_logged = false;
	}
	else if (was_ready && conn->ready_logged && !conn->flap_logged && !quiet)
	{
		conn->flap_logged = true;
		ereport(LOG,
				(errmsg("rlock %s connection to Redis at %s keeps failing soon after it is made: %s",
						conn->role, conn->server->address, conn->error),
				 errdetail("Further losses within a minute of a new connection are not logged.")));
	}
	conn->retry_at = TimestampTzPlusMilliseconds(now, conn->backoff_ms);
	conn->backoff_ms = Min(conn->backoff_ms * 2, RLOCK_BACKOFF_MAX_MS);
	if (conn->idle_drop)
	{
		/* no outage: made again at once when used, and logged afresh */
		conn_start_over(conn);
		conn->since = now;
	}
	else if (quiet)
		conn->outage_logged = true;
	else
		conn_log_failure(conn, was_ready);
	conn->replicas = -1;
	conn->role_inflight = false;
	if (conn->use == RLOCK_USE_SENTINEL || conn->use == RLOCK_USE_WATCH)
		rlock_sentinel_conn_lost(conn);
	else if (conn->use == RLOCK_USE_CLUSTER)
		rlock_router_conn_lost(conn);
	else
	{
		if (conn->node != NULL)
			rlock_router_conn_lost(conn);
		/* the primary may have moved: ask the Sentinels at once */
		if (rlock_sentinel_active())
			rlock_sentinel_recheck();
		events->lost(conn);
	}
	conn->idle_drop = false;
}

/*
 * Do waiters need the subscriptions of this subscriber connection?
 */
bool
rlock_conn_subscribed(RlockConn *conn)
{
	return events->subscribed(conn);
}

/*
 * No file descriptor is left for a new socket: close the idle connection
 * that was used least recently, if there is one (a Redis Cluster
 * primary's, made for commands that are answered).  True if one was
 * closed, and so a descriptor freed.
 */
static bool
conn_reclaim(RlockConn *asking)
{
	RlockConn  *oldest = NULL;
	int			i;

	for (i = 0; i < nall; i++)
	{
		RlockConn  *c = all[i];

		if (c == asking || c->node == NULL || c->sock == PGINVALID_SOCKET ||
			c->state != RLOCK_CONN_READY || !rlock_router_reclaimable(c))
			continue;
		if (oldest == NULL || c->used_at < oldest->used_at)
			oldest = c;
	}
	if (oldest == NULL)
		return false;
	oldest->quiet_drop = true;
	oldest->idle_drop = true;
	conn_close(oldest, "its descriptor was needed for a connection in use",
			   false);
	return true;
}

/*
 * Close a connection on purpose.  The reason goes into rlock_status()'s
 * last error only if it is the first cause (a connection dropped because
 * the other one failed keeps that failure there).
 */
static void
conn_close(RlockConn *conn, const char *reason, bool first_cause)
{
	if (conn->state == RLOCK_CONN_DOWN)
		return;
	if (!conn->failed)
	{
		if (first_cause)
			rlock_conn_set_error(conn, "%s", reason);
		else
			strlcpy(conn->error, reason, sizeof(conn->error));
	}
	conn_closed(conn);
}

/*
 * The socket is connected: start the transport's own handshake, if it
 * has one, then Redis's.
 */
static void
conn_opened(RlockConn *conn)
{
	conn->reader = rlock_reader_create(conn->cxt);
	if (conn->reader == NULL)
	{
		rlock_conn_set_error(conn, "out of memory");
		rlock_conn_give_up(conn, NULL);
		return;
	}
	{
		MemoryContext old = MemoryContextSwitchTo(conn->cxt);

		initStringInfo(&conn->out);
		MemoryContextSwitchTo(old);
	}
	conn->out_pos = 0;
	if (conn->transport == &rlock_transport_tls)
		conn->state = RLOCK_CONN_SECURING;
	else
	{
		conn->state = RLOCK_CONN_HANDSHAKE;
		rlock_handshake_begin(conn);
	}
}

/*
 * Open a new connection (or start resolving the host name first).
 */
static void
conn_start(RlockConn *conn, TimestampTz now)
{
	RlockServer *srv = conn->server;

	/* the last failure stays in conn->error, for messages, until READY */
	if (conn->state == RLOCK_CONN_DOWN)
		conn->deadline = TimestampTzPlusMilliseconds(now,
													 rlock_connect_timeout);

	if (srv->unix_socket[0] == '\0' && !rlock_is_numeric_host(srv->host) &&
		srv->resolved[0] == '\0')
	{
		rlock_resolve_start(srv);
		if (!srv->resolving)
		{
			rlock_conn_set_error(conn, "%s", srv->resolve_error);
			conn_closed(conn);
			return;
		}
		conn->state = RLOCK_CONN_RESOLVING;
		return;
	}

	/* TLS is for TCP: like libpq, a Unix socket never uses it */
	conn->transport = (srv->tls != RLOCK_TLS_OFF && srv->unix_socket[0] == '\0') ?
		&rlock_transport_tls : &rlock_transport_plain;
	if (srv->tls != RLOCK_TLS_OFF && srv->unix_socket[0] != '\0' &&
		!srv->tls_unix_logged)
	{
		srv->tls_unix_logged = true;
		ereport(LOG,
				(errmsg("rlock reaches Redis by the Unix socket \"%s\" without TLS",
						srv->unix_socket),
				 errdetail("rlock.tls applies to TCP connections only.")));
	}
	conn->state = RLOCK_CONN_CONNECTING;
	conn->handshake = 0;
	conn->failed = false;
	conn->io_want = 0;
	wait_set_stale = true;
	if (!rlock_socket_open(conn, conn_reclaim))
		conn_closed(conn);
}

/*
 * The handshake is over: the connection takes commands.
 */
void
rlock_conn_became_ready(RlockConn *conn)
{
	if (conn->use == RLOCK_USE_COMMAND || conn->use == RLOCK_USE_SYNC)
		rlock_handshake_publish_id(conn);
	conn->state = RLOCK_CONN_READY;
	conn->fence_owed = false;	/* the handshake closed the old one */
	conn->ready_at = conn->since = GetCurrentTimestamp();
	rlock_redis_status_touch();
	conn->error[0] = '\0';
	if (conn->ever_ready)
		rlock_count(RLOCK_STAT_RECONNECTS, 1);
	conn->ever_ready = true;
	if (!conn->ready_logged)
	{
		ereport(LOG,
				(errmsg("rlock %s connection to Redis at %s is ready",
						conn->role, conn->server->address)));
		conn->ready_logged = true;
	}
	if (conn->use == RLOCK_USE_SENTINEL || conn->use == RLOCK_USE_WATCH)
		rlock_sentinel_conn_ready(conn);
	else if (conn->use == RLOCK_USE_CLUSTER)
		rlock_router_conn_ready(conn);
	else
		events->ready(conn);
}

/*---- sending ----*/

/*
 * Queue a command.  False if the connection cannot take it (the caller
 * keeps the command).  Nothing is written until rlock_redis_flush() or
 * the next writeable event, so commands queued in one pass of the worker
 * go out in one write.
 */
bool
rlock_conn_send(RlockConn *conn, RlockCmd *cmd, const RlockArgs *args)
{
	int			start = conn->out.len;

	if (!conn_writable(conn))
		return false;
	/* a Redis Cluster primary's connection in use is kept */
	if (conn->node != NULL && !cmd->internal)
		conn->used_at = GetCurrentTimestamp();
	rlock_args_format(args, &conn->out);

	/* a cluster may redirect it: keep it as sent */
	cmd->wire = NULL;
	cmd->redirects = 0;
	cmd->asked = false;
	cmd->unsent = false;
	cmd->reply_refused = false;
	if (conn->node != NULL && conn->state == RLOCK_CONN_READY &&
		!cmd->internal)
	{
		cmd->wirelen = conn->out.len - start;
		cmd->wire = MemoryContextAlloc(rlock_redis_context, cmd->wirelen);
		memcpy(cmd->wire, conn->out.data + start, cmd->wirelen);
	}

	cmd->sent_at = GetCurrentTimestamp();
	cmd->send_seq = ++conn->sends;
	conn->last_sent_at = cmd->sent_at;
	dlist_push_tail(&conn->inflight, &cmd->node);
	return true;
}

/*
 * Queue a command again, as it was sent before on another connection (a
 * redirection).  False if the connection cannot take it now.
 */
bool
rlock_conn_resend(RlockConn *conn, RlockCmd *cmd)
{
	/* the output bound was checked by the caller, before an ASKING that
	 * must not go out without this */
	if (conn->failed || conn->state != RLOCK_CONN_READY || cmd->wire == NULL)
		return false;
	appendBinaryStringInfo(&conn->out, cmd->wire, cmd->wirelen);
	cmd->sent_at = GetCurrentTimestamp();
	cmd->send_seq = ++conn->sends;
	conn->last_sent_at = cmd->sent_at;
	dlist_push_tail(&conn->inflight, &cmd->node);
	return true;
}

/*
 * Hand a command its reply (NULL: lost), which ends it here.
 */
void
rlock_conn_answer(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	if (cmd->wire != NULL)
	{
		pfree(cmd->wire);
		cmd->wire = NULL;
	}
	cmd->done(conn, cmd, reply);
}

/*
 * Write as much of the output buffer as the socket takes.
 */
static void
conn_write(RlockConn *conn)
{
	while (conn->out_pos < conn->out.len)
	{
		ssize_t		n;

		conn->io_want = 0;
		n = conn->transport->write(conn, conn->out.data + conn->out_pos,
								   conn->out.len - conn->out_pos);
		if (n < 0)
		{
			rlock_conn_give_up(conn, NULL);
			return;
		}
		if (n == 0)
			return;				/* conn->io_want says what for */
		conn->out_pos += n;
	}
	conn->io_want = 0;
	conn->out.len = 0;
	conn->out.data[0] = '\0';
	conn->out_pos = 0;
}

/*
 * Drop what was written from the front of a large output buffer.
 */
static void
conn_compact(RlockConn *conn)
{
	if (conn->out_pos < RLOCK_OUT_COMPACT ||
		conn->out_pos < conn->out.len / 2)
		return;
	memmove(conn->out.data, conn->out.data + conn->out_pos,
			conn->out.len - conn->out_pos);
	conn->out.len -= conn->out_pos;
	conn->out.data[conn->out.len] = '\0';
	conn->out_pos = 0;
}

/*---- receiving ----*/

/*
 * A reply on a subscriber connection that is no answer: a published
 * message, or a push rlock never asked for.  True if handled.
 */
static bool
conn_dispatch_push(RlockConn *conn, RlockReply *reply)
{
	char		what[64];
	char		detail[128];

	switch (rlock_reply_pubsub_frame(reply))
	{
		case RLOCK_FRAME_REPLY:
			return false;
		case RLOCK_FRAME_SUNSUBSCRIBE:
			{
				const RlockReply *ch = reply->element[1];
				RlockCmd   *head = dlist_is_empty(&conn->inflight) ? NULL :
					dlist_head_element(RlockCmd, node, &conn->inflight);

				/* the confirmation of our own SUNSUBSCRIBE */
				if (head != NULL && head->shape == RLOCK_SHAPE_SUNSUBSCRIBE &&
					head->channellen == ch->len &&
					memcmp(head->channel, ch->str, ch->len) == 0)
					return false;
				/* Redis's own: the channel's slot left this node */
				if (conn->use == RLOCK_USE_SUBSCRIBER)
				{
					rlock_router_refresh_soon();
					events->unsubscribed(conn, ch->str, ch->len);
				}
				return true;
			}
		case RLOCK_FRAME_MESSAGE:
			if (conn->use == RLOCK_USE_WATCH)
				rlock_sentinel_message(conn, reply->element[1]->str,
									   reply->element[1]->len,
									   reply->element[2]->str,
									   reply->element[2]->len);
			else
				events->message(conn, reply->element[1]->str,
								reply->element[1]->len,
								reply->element[2]->str,
								reply->element[2]->len);
			return true;
		case RLOCK_FRAME_MALFORMED:
			rlock_reply_describe(reply, what, sizeof(what));
			snprintf(detail, sizeof(detail),
					 "a published message of an unexpected shape (%s)", what);
			rlock_conn_violation(conn, RLOCK_VIOLATION_PUBSUB, detail);
			return true;
	}
	return false;
}

/*
 * Is this a refusal only a replica gives: a write (READONLY), or WAIT?
 */
static bool
conn_says_replica(const RlockReply *reply)
{
	static const char wait_on_replica[] = "ERR WAIT cannot be used with replica";

	return reply->type == RLOCK_REPLY_ERROR &&
		(strncmp(reply->str, "READONLY", 8) == 0 ||
		 strncmp(reply->str, wait_on_replica,
				 sizeof(wait_on_replica) - 1) == 0);
}

/*
 * One reply read from a connection: hand it to the command it answers.
 */
static void
conn_dispatch(RlockConn *conn, RlockReply *reply)
{
	RlockCmd   *cmd;
	bool		readonly;
	char		what[64];
	char		detail[256];

	if (conn->subscriber && conn_dispatch_push(conn, reply))
		return;
	if (dlist_is_empty(&conn->inflight))
	{
		rlock_reply_describe(reply, what, sizeof(what));
		snprintf(detail, sizeof(detail),
				 "a reply with no command waiting for it (%s)", what);
		rlock_conn_violation(conn, RLOCK_VIOLATION_UNSOLICITED, detail);
		return;
	}
	cmd = dlist_head_element(RlockCmd, node, &conn->inflight);
	if (!rlock_reply_fits(reply, cmd->shape, cmd->nelements))
	{
		rlock_reply_describe(reply, what, sizeof(what));
		snprintf(detail, sizeof(detail),
				 "a reply of the wrong shape (%s) to a command", what);
		rlock_conn_violation(conn, RLOCK_VIOLATION_SHAPE, detail);
		return;
	}
	dlist_delete(&cmd->node);
	if (conn->use == RLOCK_USE_COMMAND)
		pg_atomic_write_u64(&rlock_shared->cmd_reply_at,
							(uint64) GetCurrentTimestamp());
	readonly = conn_says_replica(reply);

	/*
	 * Behind Sentinels a replica's refusal means the primary moved: the
	 * command did not run, and is answered as lost with its connection,
	 * to be sent again to the primary the Sentinels name next.
	 */
	if (reply->type == RLOCK_REPLY_ERROR && !readonly &&
		rlock_router_redirect(conn, cmd, reply))
		return;
	if (readonly && conn->node != NULL)
		rlock_router_refresh_soon();
	rlock_conn_answer(conn, cmd,
					  readonly && (rlock_sentinel_active() || conn->node != NULL) ?
					  NULL : reply);

	/*
	 * The server turned replica (a failover, a DNS name that points
	 * elsewhere now): connect again, resolving the name afresh, rather
	 * than be refused every write.
	 */
	if (readonly)
		rlock_conn_give_up(conn, "the server is a read-only replica now");
}

/*
 * The reader refused what the connection sent, or gave up its reply to
 * keep the worker within RLOCK_REPLY_BUDGET while another connection
 * read: drop the connection.  Outside pub/sub, the bytes refused were
 * the reply to the oldest command: its sender is told, with the NULL it
 * gets as the connection closes.
 */
static void
conn_reader_fault(RlockConn *conn)
{
	char		fault[256];
	char		detail[RLOCK_DETAIL_LEN];

	if (!conn->subscriber && !dlist_is_empty(&conn->inflight))
		dlist_head_element(RlockCmd, node, &conn->inflight)->reply_refused = true;
	rlock_reader_describe_fault(conn->reader, fault, sizeof(fault));
	snprintf(detail, sizeof(detail), "a reply rlock does not accept: %s",
			 fault);
	rlock_conn_violation(conn,
						 conn->reader->fault == RLOCK_READER_BUDGET ?
						 RLOCK_VIOLATION_BUDGET : RLOCK_VIOLATION_READER,
						 detail);
}

/*
 * Read what the socket has, up to a bound per wake-up (a server flooding
 * the connection must not keep the worker from everything else), and
 * dispatch every complete reply.
 */
static void
conn_read(RlockConn *conn)
{
	int			i;

	conn->read_more = false;
	for (i = 0; i < RLOCK_READS_PER_WAKE; i++)
	{
		ssize_t		n;
		RlockReply *reply;
		int			rc;

		conn->io_want = 0;
		n = conn->transport->read(conn, read_buf, RLOCK_READ_CHUNK);
		if (n < 0)
		{
			rlock_conn_give_up(conn, NULL);
			return;
		}
		if (n == 0)
			return;
		if (!rlock_reader_feed(conn->reader, read_buf, n))
			break;

		/*
		 * Every reply ends with CRLF: without a newline in the new bytes
		 * none can be complete, and asking the parser would make it scan
		 * everything buffered again (a line dripped in byte by byte would
		 * cost quadratic time).
		 */
		if (memchr(read_buf, '\n', n) == NULL)
		{
			if (!rlock_reader_check_pending(conn->reader))
				break;
			continue;
		}
		while ((rc = rlock_reader_next(conn->reader, &reply)) > 0)
		{
			conn->partial_since = 0;
			conn_dispatch(conn, reply);
			rlock_reply_free(reply);
			if (conn->failed)
				return;
		}
		if (rc < 0)
			break;
	}
	if (conn->reader->fault != RLOCK_READER_OK)
	{
		conn_reader_fault(conn);
		return;
	}
	conn->read_more = true;		/* the bound was reached */
}

/*
 * After a read: a reply left incomplete starts its clock (see conn_tick)
 * unless it had started already.
 */
static void
conn_note_partial(RlockConn *conn)
{
	if (conn->reader == NULL || !rlock_reader_partial(conn->reader))
		conn->partial_since = 0;
	else if (conn->partial_since == 0)
		conn->partial_since = GetCurrentTimestamp();
}

/*
 * The socket of a connection is ready (or a transport buffers bytes):
 * move the connection on.
 */
static void
conn_io(RlockConn *conn)
{
	RlockOpen	step;

	switch (conn->state)
	{
		case RLOCK_CONN_CONNECTING:
			if (!rlock_socket_connected(conn))
				rlock_conn_give_up(conn, NULL);
			else
				conn_opened(conn);
			if (conn->state != RLOCK_CONN_SECURING || conn->failed)
				break;
			/* FALLTHROUGH */
		case RLOCK_CONN_SECURING:
			conn->io_want = 0;
			step = conn->transport->open(conn);
			if (step == RLOCK_OPEN_FAILED)
				rlock_conn_give_up(conn, NULL);
			else if (step == RLOCK_OPEN_DONE)
			{
				conn->state = RLOCK_CONN_HANDSHAKE;
				rlock_handshake_begin(conn);
				conn_write(conn);
			}
			break;
		case RLOCK_CONN_HANDSHAKE:
		case RLOCK_CONN_READY:
			conn_read(conn);
			if (!conn->failed)
				conn_note_partial(conn);
			if (!conn->failed && conn->out_pos < conn->out.len)
			{
				conn_write(conn);
				conn_compact(conn);
			}
			break;
		case RLOCK_CONN_DOWN:
		case RLOCK_CONN_RESOLVING:
			break;
	}
}

/*---- the loop's side: ticks, flushes, waits ----*/

/*
 * Is a sync connection used?  When replicas must confirm: always with a
 * number or behind Sentinels; with "auto" on a standalone server or a
 * cluster's primary, once the primary listed replicas to its command
 * connection.
 */
static bool
conn_sync_wanted(RlockConn *conn)
{
	/*
	 * Acquisitions were on the wire when it was lost: a new sync
	 * connection's handshake closes the old one on the server before their
	 * entries are restated, used or not.
	 */
	if (conn->fence_owed)
		return true;
	if (rlock_sync_replicas == RLOCK_SYNC_OFF)
		return false;
	if (rlock_sync_replicas == RLOCK_SYNC_AUTO &&
		rlock_topology != RLOCK_TOPOLOGY_SENTINEL &&
		conn->group[RLOCK_USE_COMMAND]->replicas <= 0 &&
		conn->state == RLOCK_CONN_DOWN)
		return false;
	return true;
}

/*
 * Should the connection be up?  If not, *why says why (for requests and
 * rlock_status()), or is NULL when it is simply not used.
 */
static bool
conn_wanted(RlockConn *conn, const char **why)
{
	*why = NULL;
	if (conn->use == RLOCK_USE_SYNC && !conn_sync_wanted(conn))
		return false;
	if (rlock_redis_cluster() || conn->node != NULL ||
		conn->use == RLOCK_USE_CLUSTER)
		return rlock_router_wanted(conn);
	switch (conn->use)
	{
		case RLOCK_USE_SYNC:
		case RLOCK_USE_COMMAND:
		case RLOCK_USE_SUBSCRIBER:
			if (rlock_topology == RLOCK_TOPOLOGY_STANDALONE)
				return true;
			if (rlock_sentinel_master_known())
				return true;
			*why = rlock_sentinel_error();
			return false;
		case RLOCK_USE_SENTINEL:
		case RLOCK_USE_WATCH:
			return rlock_sentinel_active();
		case RLOCK_USE_CLUSTER:
		case RLOCK_NUSES:
			break;
	}
	return false;
}

/*
 * With keepalive on, the command connection is never idle for longer than
 * this: a PING goes out, and a server that stopped answering is found by
 * the command deadline even when nothing else is sent (waiters sleeping
 * on a long TTL, say).
 */
static TimestampTz
conn_keepalive_at(RlockConn *conn)
{
	int			interval = Max(Min(1000, rlock_command_timeout / 2), 10);

	return TimestampTzPlusMilliseconds(conn->last_sent_at, interval);
}

/*
 * Keep the command connection checked while "on" (the worker has waiting
 * requests).
 */
void
rlock_redis_keepalive(bool on)
{
	keepalive = on;
}

/*
 * How long the oldest command may wait for its answer: on the sync
 * connection, WAIT may take rlock.sync_timeout on top.
 */
static int
conn_command_timeout(RlockConn *conn)
{
	if (conn->use == RLOCK_USE_SYNC)
		return rlock_command_timeout + rlock_sync_timeout;
	return rlock_command_timeout;
}

static const char *
conn_timeout_reason(RlockConn *conn)
{
	switch (conn->state)
	{
		case RLOCK_CONN_CONNECTING:
			return "timed out while connecting";
		case RLOCK_CONN_SECURING:
			return "timed out during the TLS handshake (does the server speak TLS on this port?)";
		default:
			return "timed out during the connection handshake";
	}
}

/*
 * Does a ready connection ask ROLE now and then, to know the replicas
 * "auto" waits for?  The sync connection does; so does the command
 * connection while the sync one is not made for want of replicas, to see
 * them come.
 */
static bool
conn_asks_role(RlockConn *conn)
{
	if (conn->role_inflight)
		return false;
	if (conn->use == RLOCK_USE_SYNC)
		return true;
	return conn->use == RLOCK_USE_COMMAND &&
		rlock_sync_replicas == RLOCK_SYNC_AUTO &&
		conn->group[RLOCK_USE_SYNC]->state == RLOCK_CONN_DOWN;
}

static TimestampTz
conn_role_due(RlockConn *conn)
{
	return TimestampTzPlusMilliseconds(conn->role_at,
									   conn->use == RLOCK_USE_SYNC ?
									   RLOCK_ROLE_INTERVAL_MS :
									   RLOCK_ROLE_LOOKOUT_MS);
}

/*
 * Has the connection's reader a fault its connection was not dropped for
 * yet?  A reader gives up its reply when another connection's reading
 * needs the room (reply.c).
 */
static bool
conn_reader_faulted(RlockConn *conn)
{
	return conn->reader != NULL && !conn->failed &&
		conn->reader->fault != RLOCK_READER_OK;
}

/*
 * A reply must not stay incomplete for longer than rlock.command_timeout,
 * whether a command waits for it or not (a push that stops half-way on a
 * subscriber connection, which has no command waiting).
 */
static TimestampTz
conn_partial_deadline(RlockConn *conn)
{
	return TimestampTzPlusMilliseconds(conn->partial_since,
									   rlock_command_timeout);
}

/*
 * Advance one connection's life cycle: start attempts when due, enforce
 * the connect and command deadlines, drop connections found failed, and
 * check an idle command connection when asked to.
 */
static void
conn_tick(RlockConn *conn, TimestampTz now)
{
	RlockServer *srv = conn->server;

	/* its reader gave up its reply while another connection read */
	if (conn_reader_faulted(conn))
		conn_reader_fault(conn);
	if (conn->failed)
	{
		conn_closed(conn);
		return;
	}

	switch (conn->state)
	{
		case RLOCK_CONN_DOWN:
			{
				const char *why;

				if (!conn_wanted(conn, &why))
				{
					if (why != NULL && strcmp(conn->error, why) != 0)
						strlcpy(conn->error, why, sizeof(conn->error));
					break;
				}
			}
			if (now >= conn->retry_at)
				conn_start(conn, now);
			break;
		case RLOCK_CONN_RESOLVING:
			rlock_resolve_check(srv);
			if (!srv->resolving)
			{
				if (srv->resolved[0] != '\0')
					conn_start(conn, now);
				else
				{
					rlock_conn_set_error(conn, "%s", srv->resolve_error);
					conn_closed(conn);
				}
			}
			else if (now >= conn->deadline)
			{
				rlock_conn_set_error(conn,
									 "could not resolve \"%s\" within rlock.connect_timeout",
									 srv->host);
				conn_closed(conn);
			}
			break;
		case RLOCK_CONN_CONNECTING:
		case RLOCK_CONN_SECURING:
		case RLOCK_CONN_HANDSHAKE:
			if (now >= conn->deadline)
				conn_close(conn, conn_timeout_reason(conn), true);
			break;
		case RLOCK_CONN_READY:
			if (conn->node != NULL)
			{
				const char *why;

				/* idle, a node that no longer serves slots, or a
				 * topology that is no longer in use */
				if (!conn_wanted(conn, &why))
				{
					bool		idle = rlock_redis_cluster() &&
						conn->node->primary;

					conn->quiet_drop = true;
					conn->idle_drop = idle;
					conn_close(conn, idle ?
							   "not used for a while (a Redis Cluster primary's connections are made when used)" :
							   "the node no longer serves slots of the Redis Cluster",
							   !idle);
					break;
				}
			}
			if (conn->use == RLOCK_USE_SYNC &&
				dlist_is_empty(&conn->inflight))
			{
				const char *why;

				/* made for a fence only, or no longer used */
				if (!conn_wanted(conn, &why))
				{
					conn->quiet_drop = true;
					conn_close(conn, "the sync connection is not used now",
							   true);
					break;
				}
			}
			if (!dlist_is_empty(&conn->inflight))
			{
				RlockCmd   *oldest = dlist_head_element(RlockCmd, node,
														&conn->inflight);

				if (now >= TimestampTzPlusMilliseconds(oldest->sent_at,
													   conn_command_timeout(conn)))
				{
					char		msg[128];

					snprintf(msg, sizeof(msg),
							 "no answer within rlock.command_timeout (%d ms)",
							 conn_command_timeout(conn));
					conn_close(conn, msg, true);

					/*
					 * A server that does not answer commands is not to be
					 * trusted with unlock messages either: subscribe anew
					 * once it answers again.
					 */
					if (conn->use == RLOCK_USE_COMMAND)
						conn_close(conn->group[RLOCK_USE_SUBSCRIBER],
								   "the command connection stopped getting answers",
								   false);
				}
			}
			else if (keepalive && conn->use == RLOCK_USE_COMMAND &&
					 now >= conn_keepalive_at(conn))
				rlock_handshake_ping(conn);
			if (conn->state == RLOCK_CONN_READY && conn->partial_since != 0 &&
				now >= conn_partial_deadline(conn))
			{
				char		msg[128];

				snprintf(msg, sizeof(msg),
						 "a reply left incomplete for longer than rlock.command_timeout (%d ms)",
						 rlock_command_timeout);
				conn_close(conn, msg, true);
				break;
			}
			if (conn_asks_role(conn) &&
				now >= conn_role_due(conn))
				rlock_handshake_role(conn);
			break;
	}
}

void
rlock_redis_tick(TimestampTz now)
{
	int			i;

	for (i = 0; i < nall; i++)
		conn_tick(all[i], now);
	rlock_sentinel_tick(now);
	rlock_router_tick(now);
}

/*
 * When the reader of a connection needs the tick: at once if it gave up
 * its reply (to another connection's reading), when a reply left
 * incomplete is overdue.
 */
static TimestampTz
conn_reader_due(RlockConn *conn)
{
	if (conn_reader_faulted(conn))
		return 0;
	if (conn->state == RLOCK_CONN_READY && conn->partial_since != 0)
		return conn_partial_deadline(conn);
	return DT_NOEND;
}

static TimestampTz
conn_next_tick(RlockConn *conn)
{
	const char *why;

	if (conn->failed || conn->read_more)
		return 0;
	switch (conn->state)
	{
		case RLOCK_CONN_DOWN:
			return conn_wanted(conn, &why) ? conn->retry_at : DT_NOEND;
		case RLOCK_CONN_RESOLVING:
		case RLOCK_CONN_CONNECTING:
		case RLOCK_CONN_SECURING:
		case RLOCK_CONN_HANDSHAKE:
			return conn->deadline;
		case RLOCK_CONN_READY:
			if (!dlist_is_empty(&conn->inflight))
			{
				RlockCmd   *oldest = dlist_head_element(RlockCmd, node,
														&conn->inflight);

				return TimestampTzPlusMilliseconds(oldest->sent_at,
												   conn_command_timeout(conn));
			}
			if (keepalive && conn->use == RLOCK_USE_COMMAND)
				return conn_keepalive_at(conn);
			if (conn_asks_role(conn))
				return conn_role_due(conn);
			break;
	}
	return DT_NOEND;
}

/*
 * When rlock_redis_tick() next has something to do (0: at once).
 */
TimestampTz
rlock_redis_next_tick(void)
{
	TimestampTz next = DT_NOEND;
	int			i;

	for (i = 0; i < nall; i++)
	{
		next = Min(next, conn_next_tick(all[i]));
		next = Min(next, conn_reader_due(all[i]));
	}
	next = Min(next, rlock_router_next());
	return Min(next, rlock_sentinel_next());
}

/*
 * Write what the connections have queued, now: one write per connection
 * for everything queued since the last wake-up.
 */
void
rlock_redis_flush(void)
{
	int			i;

	for (i = 0; i < nall; i++)
	{
		RlockConn  *conn = all[i];

		if (!conn->failed && conn->state >= RLOCK_CONN_HANDSHAKE &&
			conn->out_pos < conn->out.len)
		{
			conn_write(conn);
			conn_compact(conn);
		}
	}
}

/*
 * The socket events a connection waits for now.
 */
static uint32
conn_events(RlockConn *conn)
{
	switch (conn->state)
	{
		case RLOCK_CONN_CONNECTING:
			return WL_SOCKET_WRITEABLE;
		case RLOCK_CONN_SECURING:
			return conn->io_want ? conn->io_want : WL_SOCKET_READABLE;
		case RLOCK_CONN_HANDSHAKE:
		case RLOCK_CONN_READY:
			/* a TLS read or write may wait for the other direction */
			return WL_SOCKET_READABLE | conn->io_want |
				(conn->out_pos < conn->out.len ? WL_SOCKET_WRITEABLE : 0);
		default:
			return 0;
	}
}

static void
wait_set_build(void)
{
	int			i;

	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	wait_set = rlock_wait_event_set(rlock_redis_context, 2 + nall);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
					  NULL, NULL);
	for (i = 0; i < nall; i++)
	{
		RlockConn  *conn = all[i];

		conn->pos = -1;
		if (conn->sock == PGINVALID_SOCKET)
			continue;
		conn->registered = conn_events(conn);
		if (conn->registered == 0)
			conn->registered = WL_SOCKET_READABLE;
		conn->pos = AddWaitEventToSet(wait_set, conn->registered,
									  conn->sock, NULL, conn);
	}
	wait_set_stale = false;
}

/*
 * Sleep until the latch is set, a socket is ready or timeout_ms passes
 * (-1: no timeout), then move the connections whose sockets are ready.
 */
void
rlock_redis_wait(long timeout_ms)
{
	static WaitEvent *events_out = NULL;
	static int	max_events = 0;
	int			nevents;
	int			i;

	for (i = 0; i < nall; i++)
	{
		if (all[i]->read_more ||
			(all[i]->transport != NULL && all[i]->tls != NULL &&
			 all[i]->transport->pending(all[i])))
			timeout_ms = 0;
	}
	if (wait_set_stale)
		wait_set_build();
	if (max_events < 2 + nall)
	{
		if (events_out != NULL)
			pfree(events_out);
		max_events = 2 + nall;
		events_out = MemoryContextAlloc(rlock_redis_context,
										sizeof(WaitEvent) * max_events);
	}
	for (i = 0; i < nall; i++)
	{
		RlockConn  *conn = all[i];
		uint32		want = conn_events(conn);

		conn->woke = false;
		if (conn->pos >= 0 && want != 0 && want != conn->registered)
		{
			ModifyWaitEvent(wait_set, conn->pos, want, NULL);
			conn->registered = want;
		}
	}

	nevents = WaitEventSetWait(wait_set, timeout_ms, events_out,
							   max_events,
							   rlock_wait_event(&wait_event, "RlockWorkerMain"));
	for (i = 0; i < nevents; i++)
	{
		RlockConn  *conn = (RlockConn *) events_out[i].user_data;

		if (events_out[i].events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			continue;
		}
		if (conn == NULL || conn->pos != events_out[i].pos || conn->failed)
			continue;
		conn->woke = true;
		conn_io(conn);
	}

	/*
	 * Bytes left from an earlier wake-up, in the reader's way or inside
	 * TLS, with no socket event to say so: one pass for each connection
	 * that had none now.
	 */
	for (i = 0; i < nall; i++)
	{
		RlockConn  *conn = all[i];

		if (!conn->woke && !conn->failed && conn->state >= RLOCK_CONN_HANDSHAKE &&
			(conn->read_more ||
			 (conn->tls != NULL && conn->transport->pending(conn))))
			conn_io(conn);
	}
}
