/*-------------------------------------------------------------------------
 *
 * topology.c
 *		Which connection serves a key, as rlock.topology says: a
 *		standalone server, the primary the Sentinels name, or the primaries
 *		of a Redis Cluster; the sync policy, a reload, and what
 *		rlock_status() shows.
 *
 * The worker asks one question before a command leaves: which
 * connections serve this key (or channel)?  rlock_redis_route_key()
 * answers it in one call with everything a send needs (RlockRoute): the
 * command, subscriber and sync connections, how many replicas must
 * confirm an acquisition there, whether the keys of a command must share
 * a slot, and which pub/sub namespaces unlock messages use.  The older
 * questions (rlock_redis_route, rlock_redis_sync_for, ...) are answered
 * from it.
 *
 * A standalone server and the primary the Sentinels name have their
 * connections here: command, subscriber and sync, made when the worker
 * starts, given hooks that pass their events on to the worker's table
 * (RlockConnEvents).  The Sentinels' own connections are sentinel.c's; a
 * Redis Cluster's, router.c's and slotmap.c's.
 *
 * The sync policy: a sync connection carries acquisitions that replicas
 * must confirm (WAIT), and is made only while some must: always with
 * rlock.sync_replicas set to a number or behind Sentinels, with "auto"
 * once the primary listed a replica, and for a fence after a sync
 * connection was lost with acquisitions on the wire.
 *
 * A reload drops the sync connections no longer used, and every
 * connection if a connection setting changed; they are made again with
 * the new settings at once.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/topology.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/redis_int.h"

static const RlockConnEvents *worker;	/* what the worker is told */
static RlockServer *server = NULL;	/* the data node: the primary */
static RlockConn *conns[RLOCK_NDATA];	/* its connections, by use; unused
										 * in a Redis Cluster */

/* the topology these connections were made for, and its nodes */
static int	configured_topology = -1;
static char *configured_nodes = NULL;

/* Replicas confirming acquisitions: the latest WAIT's answer (-1: none
 * yet), the latest acquisition undone for want of them */
static int	sync_acks = -1;
static char sync_failure[RLOCK_DETAIL_LEN];
static TimestampTz sync_failure_at = 0;

/*---- the data connections' hooks ----*/

static void
topology_ready(RlockConn *conn)
{
	worker->ready(conn);
}

static void
topology_lost(RlockConn *conn)
{
	/* the primary may have moved: ask the Sentinels at once */
	if (rlock_sentinel_active())
		rlock_sentinel_recheck();
	worker->lost(conn);
}

/*
 * Should a data connection be up?  Not in a Redis Cluster (its primaries
 * have their own); behind Sentinels, once they named the primary.
 */
static bool
topology_wanted(RlockConn *conn, const char **why)
{
	if (rlock_router_active())
		return false;
	if (rlock_topology == RLOCK_TOPOLOGY_STANDALONE)
		return true;
	if (rlock_sentinel_master_known())
		return true;
	*why = rlock_sentinel_error();
	return false;
}

static void
topology_message(RlockConn *conn, const char *channel, int channellen,
				 const char *payload, int payloadlen)
{
	worker->message(conn, channel, channellen, payload, payloadlen);
}

static void
topology_unsubscribed(RlockConn *conn, const char *channel, int channellen)
{
	worker->unsubscribed(conn, channel, channellen);
}

static void
topology_invalidated(RlockConn *conn, const RlockReply *keys)
{
	worker->invalidated(conn, keys);
}

/*
 * The server answered as a replica: behind Sentinels the primary moved,
 * and the command is answered as lost, to go to the one they name next.
 */
static bool
topology_demoted(RlockConn *conn)
{
	return rlock_sentinel_active();
}

static const RlockConnHooks topology_hooks = {
	.ready = topology_ready,
	.lost = topology_lost,
	.wanted = topology_wanted,
	.message = topology_message,
	.unsubscribed = topology_unsubscribed,
	.invalidated = topology_invalidated,
	.demoted = topology_demoted
};

/*---- settings and setup ----*/

/*
 * The data node from the settings.  With Sentinel, its address comes
 * from the Sentinels later (topology_primary_moved); in a Redis Cluster
 * it is not used (router.c has a server per primary).
 */
static void
topology_configure(RlockServer *srv)
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
topology_settings_changed(RlockServer *srv)
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
 * The Sentinels name another primary (or the first one): point the data
 * connections at it.  Those up now are dropped at the next tick and made
 * again to the new address at once.
 */
static void
topology_primary_moved(const char *host, int port)
{
	int			i;

	rlock_server_set_address(server, host, port);
	for (i = 0; i < RLOCK_NDATA; i++)
	{
		RlockConn  *conn = conns[i];

		if (conn->state != RLOCK_CONN_DOWN && !conn->failed)
		{
			conn->quiet_drop = true;	/* sentinel.c logged the move */
			rlock_conn_give_up(conn, "the Sentinels named another primary");
		}
		rlock_conn_start_over(conn);
	}
	rlock_redis_status_touch();
}

/*
 * Set up the connections of the server the settings name.  "events" says
 * what to tell the worker about them.
 */
void
rlock_redis_start(const RlockConnEvents *events)
{
	int			i;

	worker = events;
	rlock_redis_context = AllocSetContextCreate(TopMemoryContext,
												"rlock redis",
												ALLOCSET_DEFAULT_SIZES);
	rlock_conn_init(rlock_handshake_begin);
	server = MemoryContextAllocZero(rlock_redis_context, sizeof(RlockServer));
	topology_configure(server);
	for (i = 0; i < RLOCK_NDATA; i++)
		conns[i] = rlock_conn_create(server, i, conns, &topology_hooks);
	rlock_sentinel_start(topology_primary_moved);
	rlock_router_start(events);
	rlock_slotmap_configure();
}

/*
 * Close the sync connections that rlock.sync_replicas no longer uses.
 */
static void
topology_close_unused_sync(void)
{
	const char *why;
	int			i;

	for (i = 0; i < rlock_conn_count(); i++)
	{
		RlockConn  *conn = rlock_conn_at(i);

		if (conn->use == RLOCK_USE_SYNC && !rlock_topology_wanted(conn, &why) &&
			conn->state != RLOCK_CONN_DOWN)
		{
			conn->quiet_drop = true;
			rlock_conn_close(conn, "rlock.sync_replicas is off", true);
		}
	}
}

/*
 * After a configuration reload: if any connection setting changed, drop
 * every connection and connect again with the new settings at once.
 * Certificate and key files are read again for every new TLS connection
 * after a reload, changed or not.
 */
void
rlock_redis_reload(void)
{
	int			i;

	/* not a connection setting: only whether the sync connections are used */
	rlock_redis_status_touch();
	topology_close_unused_sync();

	rlock_tls_reset();
	if (!topology_settings_changed(server))
		return;

	ereport(LOG,
			(errmsg("rlock connection settings changed, reconnecting to Redis")));
	for (i = 0; i < rlock_conn_count(); i++)
	{
		RlockConn  *conn = rlock_conn_at(i);

		conn->quiet_drop = true;	/* logged above, not a failure */
		rlock_conn_close(conn, "connection settings changed", true);
	}
	rlock_server_forget(server);
	topology_configure(server);
	rlock_sentinel_configure();
	rlock_slotmap_configure();
	rlock_redis_status_touch();
	for (i = 0; i < rlock_conn_count(); i++)
		rlock_conn_start_over(rlock_conn_at(i));
}

/*---- which connection serves a key ----*/

bool
rlock_redis_cluster(void)
{
	return rlock_router_active();
}

/*---- client-side tracking ----*/

/*
 * The CLIENT ID of the subscriber that a command connection's tracking
 * can redirect its invalidations to: the server's own subscriber, once it
 * is ready and told its id; 0 if none (in a Redis Cluster: not yet), or
 * if the server sends its commands' own invalidations too early for
 * worker/track.c (before Redis 7.0).
 */
int64
rlock_redis_redirect_id(RlockConn *command)
{
	RlockConn  *sub = conns[RLOCK_USE_SUBSCRIBER];

	if (rlock_router_active() || command != conns[RLOCK_USE_COMMAND] ||
		sub->state != RLOCK_CONN_READY || !command->defers_invalidations)
		return 0;
	return sub->client_id;
}

/*
 * The namespaces unlock messages use now (RLOCK_PUBSUB_*): always classic
 * outside a cluster, as Redisson; in one, as rlock.cluster_pubsub says.
 */
int
rlock_redis_pubsub(void)
{
	if (!rlock_router_active())
		return RLOCK_PUBSUB_CLASSIC;
	return rlock_slotmap_pubsub();
}

/*
 * Where a key (or a channel) is served, and what a command on it needs:
 * see RlockRoute.  "uses" are the connections (RLOCK_ROUTE_*) the caller
 * is about to use: in a Redis Cluster, a primary's are made when used and
 * closed when idle, so only those are counted as used; the others are
 * named as they are.  Where no primary serves the key's slot, all three
 * are a connection that is never ready, and rlock_conn_error() says why.
 */
void
rlock_redis_route_key(const char *key, int keylen, int uses,
					  RlockRoute *route)
{
	RlockConn **group = conns;
	int			ask;

	route->cluster = rlock_router_active();
	if (route->cluster)
		group = rlock_router_group(rlock_key_slot(key, keylen), uses);
	route->command = group[RLOCK_USE_COMMAND];
	route->subscriber = group[RLOCK_USE_SUBSCRIBER];
	route->sync = group[RLOCK_USE_SYNC];
	route->sync_need = rlock_redis_sync_need(route->sync, &ask);
	route->sync_ask = ask;
	route->pubsub = rlock_redis_pubsub();
}

/*
 * The command connection for a key: the one, or in a Redis Cluster the
 * key's slot's primary's (which may be a connection that is never ready,
 * when no primary serves the slot; rlock_conn_error() says so).
 */
RlockConn *
rlock_redis_route(const char *key, int keylen)
{
	RlockRoute	route;

	rlock_redis_route_key(key, keylen, RLOCK_ROUTE_COMMAND, &route);
	return route.command;
}

/*
 * The subscriber connection for a channel: in a Redis Cluster the
 * channel's slot's primary's, which sharded pub/sub needs and Redisson
 * uses for classic pub/sub too.
 */
RlockConn *
rlock_redis_subscriber_for(const char *channel, int len)
{
	RlockRoute	route;

	rlock_redis_route_key(channel, len, RLOCK_ROUTE_SUBSCRIBER, &route);
	return route.subscriber;
}

/*
 * The sync connection for a key: the one, or in a Redis Cluster the key's
 * slot's primary's.
 */
RlockConn *
rlock_redis_sync_for(const char *key, int keylen)
{
	RlockRoute	route;

	rlock_redis_route_key(key, keylen, RLOCK_ROUTE_SYNC, &route);
	return route.sync;
}

/*
 * The command connection for commands without a key: in a Redis Cluster,
 * a ready primary's.
 */
RlockConn *
rlock_redis_command_conn(void)
{
	if (rlock_router_active())
		return rlock_router_any();
	return conns[RLOCK_USE_COMMAND];
}

/*
 * May the primary come back under another address: a Sentinel answers,
 * and will name the replica it promotes.  Waiters keep their place then.
 */
bool
rlock_redis_failover_awaited(void)
{
	/* in a Redis Cluster: while a node answers the map's questions */
	if (rlock_router_active())
		return rlock_slotmap_answering();
	return rlock_sentinel_answering();
}

/*---- the sync policy ----*/

/*
 * Is a sync connection used?  When replicas must confirm: always with a
 * number or behind Sentinels; with "auto" on a standalone server or a
 * cluster's primary, once the primary listed replicas to its command
 * connection.
 */
static bool
topology_sync_wanted(RlockConn *conn)
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
 * rlock_status()), or is NULL when it is simply not used.  The sync
 * policy first, then whoever made the connection.
 */
bool
rlock_topology_wanted(RlockConn *conn, const char **why)
{
	*why = NULL;
	if (conn->use == RLOCK_USE_SYNC && !topology_sync_wanted(conn))
		return false;
	return conn->hooks->wanted(conn, why);
}

/*
 * Is the connection to be made (again) when down: used, or owing a fence?
 */
bool
rlock_redis_conn_wanted(RlockConn *conn)
{
	const char *why;

	return rlock_topology_wanted(conn, &why);
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

/*---- what rlock_status() shows ----*/

/*
 * What an acquisition waits for now, for rlock_status(): "off", the
 * number of replicas, or why nothing.
 */
static void
topology_sync_wait(char *buf, size_t size, RlockConn *sync)
{
	RlockConn  *cmd = sync->group[RLOCK_USE_COMMAND];
	int			ask;
	int			need;

	if (rlock_sync_replicas == RLOCK_SYNC_OFF)
		strlcpy(buf, "off", size);
	else if (rlock_router_active())
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
 * Has anything rlock_status() shows changed since it was published?
 */
static bool
topology_status_changed(RlockWorkerStatus *st, int channels, int sync_state)
{
	RlockWorkerStatus now;

	if (rlock_redis_status_changed() || st->channels != channels)
		return true;
	if (!rlock_router_active())
		return st->cmd_state != (int) conns[RLOCK_USE_COMMAND]->state ||
			st->sub_state != (int) conns[RLOCK_USE_SUBSCRIBER]->state ||
			st->sync_state != sync_state;
	/* the states of many connections: compare what would be shown */
	rlock_slotmap_status(&now);
	return now.cmd_state != st->cmd_state || now.sub_state != st->sub_state ||
		now.sync_state != st->sync_state;
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
	int			sync_state = rlock_topology_wanted(sync, &why) ||
		sync->state != RLOCK_CONN_DOWN ? (int) sync->state : -1;

	if (!topology_status_changed(st, channels, sync_state))
		return;
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
	topology_sync_wait(st->sync_wait, sizeof(st->sync_wait), sync);
	st->sync_acks = sync_acks;
	strlcpy(st->sync_failure, sync_failure, sizeof(st->sync_failure));
	st->sync_failure_at = sync_failure_at;
	rlock_sentinel_status(st);
	st->cluster_primaries = 0;
	st->cluster_map_known = false;
	st->cluster_node[0] = '\0';
	st->cluster_pubsub = rlock_redis_pubsub();
	if (rlock_router_active())
	{
		st->replicas = -1;
		rlock_slotmap_status(st);
	}
	rlock_status_end_write();
}
