/*-------------------------------------------------------------------------
 *
 * slotmap.c
 *		Redis Cluster: the connection that asks a cluster for its slot
 *		map, and what rlock_status() shows of the cluster.
 *
 * With rlock.topology = cluster, a connection of its own (role
 * "cluster") goes to one node at a time, starting with the seeds of
 * rlock.nodes and going on to the primaries known, and asks CLUSTER
 * SHARDS (CLUSTER SLOTS from a server before 7.0) for the slot map: at
 * once when it is made, every RLOCK_REFRESH_MS, and sooner when router.c
 * finds that the map changed.  A map is read by cluster.c, as untrusted
 * input, and taken by router.c, which makes a node of each primary.  A
 * map with more primaries than the worker may hold sockets is refused.
 *
 * The same connection asks PUBSUB SHARDNUMSUB once, as Redisson does,
 * to know whether the cluster has sharded pub/sub (rlock.cluster_pubsub
 * = auto follows the answer).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/slotmap.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/redis_int.h"

/* The map is asked for this often (router.c may ask sooner) */
#define RLOCK_REFRESH_MS		5000

static RlockClusterMap *map = NULL; /* the latest reply, parsed */

/* The connection that asks for the map, and where it goes */
static RlockServer *seed = NULL;
static RlockConn *topo = NULL;
static RlockNodeAddr seeds[RLOCK_MAX_NODES];
static int	nseeds = 0;
static int	seed_next = 0;		/* next address to try: seeds, then
								 * primaries */
static bool use_slots = false;	/* the server knows no CLUSTER SHARDS */
static bool slots_once = false;	/* the last SHARDS could not be read */
static bool sharded_known = false;	/* PUBSUB SHARDNUMSUB was answered */
static bool sharded_ok = false; /* ... and not refused */
static bool refresh_inflight = false;
static bool map_too_big_logged = false;

/* Our own map query */
typedef struct SlotmapCmd
{
	RlockCmd	cmd;
	bool		shards;			/* CLUSTER SHARDS, not SLOTS */
} SlotmapCmd;

/*---- the map ----*/

/*
 * How many primaries of a map serve slots (those without any yet need no
 * connection until a slot migrates to them).
 */
static int
slotmap_serving(const RlockClusterMap *m)
{
	bool		serving[RLOCK_CLUSTER_MAX_NODES];
	int			n = 0;
	int			i;

	memset(serving, 0, sizeof(serving));
	for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
	{
		if (m->owner[i] >= 0 && !serving[m->owner[i]])
		{
			serving[m->owner[i]] = true;
			n++;
		}
	}
	return n;
}

/*
 * The node refused to give the map.
 */
static void
slotmap_refused(RlockConn *conn, SlotmapCmd *rc, const RlockReply *reply)
{
	char		why[RLOCK_DETAIL_LEN];

	/*
	 * Redis 6 knows CLUSTER SLOTS only: "ERR Unknown subcommand or wrong
	 * number of arguments for 'SHARDS'. Try CLUSTER HELP." (7.0 words it
	 * "ERR unknown subcommand 'shards'. ...")
	 */
	if (rc->shards && strncmp(reply->str, "ERR ", 4) == 0 &&
		strstr(reply->str, "nknown subcommand") != NULL)
	{
		use_slots = true;
		rlock_router_refresh_again();
		return;
	}
	snprintf(why, sizeof(why), "%s refused to give the slot map: %.200s",
			 conn->server->address, reply->str);
	rlock_router_map_failed(why);
	rlock_conn_give_up(conn, why);
}

/*
 * Each primary in use needs a connection, and the map's one more: more
 * primaries than descriptors would fail keys at random.  True if the
 * map is refused for that.
 */
static bool
slotmap_too_big(RlockConn *conn)
{
	char		why[RLOCK_DETAIL_LEN];

	if (slotmap_serving(map) <= max_safe_fds / 3 - 1)
		return false;
	snprintf(why, sizeof(why),
			 "the Redis Cluster has %d primaries, more than the %d connections rlock may hold open besides the map's: raise max_files_per_process (rlock may use a third of the descriptors it leaves free) or the server's open files limit",
			 slotmap_serving(map), max_safe_fds / 3 - 1);
	rlock_router_map_failed(why);
	rlock_redis_status_error(why);
	if (!map_too_big_logged)
		ereport(WARNING,
				(errmsg("rlock does not use the slot map of the Redis Cluster at %s",
						conn->server->address),
				 errdetail_internal("%s", why)));
	map_too_big_logged = true;
	return true;
}

static void
slotmap_reply(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	SlotmapCmd *rc = (SlotmapCmd *) cmd;
	bool		shards = rc->shards;
	char		error[256];
	char		detail[RLOCK_DETAIL_LEN];
	char		why[RLOCK_DETAIL_LEN];
	bool		ok;

	refresh_inflight = false;
	if (reply != NULL && !conn->failed && reply->type == RLOCK_REPLY_ERROR)
		slotmap_refused(conn, rc, reply);
	pfree(rc);
	if (reply == NULL || conn->failed || reply->type == RLOCK_REPLY_ERROR)
		return;
	if (shards)
		ok = rlock_cluster_map_from_shards(reply,
										   conn->server->tls != RLOCK_TLS_OFF,
										   conn->server->host, map,
										   error, sizeof(error));
	else
		ok = rlock_cluster_map_from_slots(reply, conn->server->host, map,
										  error, sizeof(error));
	if (!ok && shards && strcmp(error, RLOCK_CLUSTER_SHARD_TWO_PRIMARIES) == 0)
	{
		/*
		 * A node that was a replica and now serves slots of its own may
		 * keep its old shard's id (seen with Redis 8): CLUSTER SHARDS then
		 * lists two primaries up for one set of slots, and only CLUSTER
		 * SLOTS says which serves which.  Asked at once, that time.
		 */
		slots_once = true;
		rlock_router_refresh_again();
		return;
	}
	if (ok && slotmap_too_big(conn))
		return;
	if (!ok)
	{
		snprintf(detail, sizeof(detail), "a slot map rlock does not accept: %s",
				 error);
		snprintf(why, sizeof(why), "%s sent %s", conn->server->address, detail);
		rlock_router_map_failed(why);
		rlock_conn_violation(conn, RLOCK_VIOLATION_SHAPE, detail);
		return;
	}
	rlock_router_apply(map, seed->address);
	map_too_big_logged = false;
}

static void
slotmap_send_refresh(TimestampTz now)
{
	bool		slots = use_slots || slots_once;
	SlotmapCmd *rc = (SlotmapCmd *)
		rlock_router_send_own(topo, slotmap_reply, RLOCK_SHAPE_ARRAY,
							  sizeof(SlotmapCmd), "CLUSTER",
							  slots ? "SLOTS" : "SHARDS");

	if (rc == NULL)
		return;
	slots_once = false;
	rc->shards = !slots;
	refresh_inflight = true;
	rlock_router_refreshing(now,
							TimestampTzPlusMilliseconds(now, RLOCK_REFRESH_MS));
}

/*
 * Point the map connection at the next address: the seeds, then the
 * primaries known.
 */
static void
slotmap_next_address(void)
{
	RlockNode **nodes;
	int			nnodes = rlock_router_nodes(&nodes);
	int			total = nseeds + nnodes;
	int			i;

	for (i = 0; i < total; i++)
	{
		int			k = (seed_next + i) % total;
		const char *host;
		int			port;

		if (k < nseeds)
		{
			host = seeds[k].host;
			port = seeds[k].port;
		}
		else if (nodes[k - nseeds]->primary)
		{
			host = nodes[k - nseeds]->server.host;
			port = nodes[k - nseeds]->server.port;
		}
		else
			continue;
		seed_next = (k + 1) % total;
		rlock_server_set_address(seed, host, port);
		return;
	}
}

/*---- pub/sub ----*/

static void
slotmap_shardnumsub_reply(RlockConn *conn, RlockCmd *cmd,
						  const RlockReply *reply)
{
	if (reply != NULL)
	{
		bool		ok = reply->type != RLOCK_REPLY_ERROR;

		if (!sharded_known || ok != sharded_ok)
			rlock_redis_status_touch();
		sharded_known = true;
		sharded_ok = ok;
	}
	pfree(cmd);
}

/*
 * The namespaces unlock messages use in a cluster (RLOCK_PUBSUB_*), as
 * rlock.cluster_pubsub says; "auto" takes sharded pub/sub where the
 * cluster answered PUBSUB SHARDNUMSUB (Redis 7.0 and later).
 */
int
rlock_slotmap_pubsub(void)
{
	switch (rlock_cluster_pubsub)
	{
		case RLOCK_CLUSTER_PUBSUB_SHARDED:
			return RLOCK_PUBSUB_SHARDED;
		case RLOCK_CLUSTER_PUBSUB_CLASSIC:
			return RLOCK_PUBSUB_CLASSIC;
		case RLOCK_CLUSTER_PUBSUB_BOTH:
			return RLOCK_PUBSUB_CLASSIC | RLOCK_PUBSUB_SHARDED;
		default:
			return sharded_known && sharded_ok ? RLOCK_PUBSUB_SHARDED :
				RLOCK_PUBSUB_CLASSIC;
	}
}

/*---- the map connection ----*/

/*
 * Ready: ask whether the cluster knows sharded pub/sub, as Redisson does
 * when it connects, and for the map.
 */
static void
slotmap_ready(RlockConn *conn)
{
	(void) rlock_router_send_own(topo, slotmap_shardnumsub_reply,
								 RLOCK_SHAPE_ARRAY, sizeof(RlockCmd),
								 "PUBSUB", "SHARDNUMSUB");
	slotmap_send_refresh(GetCurrentTimestamp());
}

/*
 * Lost: the next node is asked.
 */
static void
slotmap_lost(RlockConn *conn)
{
	refresh_inflight = false;
	slotmap_next_address();
}

static bool
slotmap_wanted(RlockConn *conn, const char **why)
{
	return rlock_router_active() && nseeds + rlock_router_primaries() > 0;
}

static const RlockConnHooks slotmap_hooks = {
	.ready = slotmap_ready,
	.lost = slotmap_lost,
	.wanted = slotmap_wanted
};

/*
 * The settings changed (or the worker starts): seeds from rlock.nodes.
 * The map and its nodes stay: a new map replaces them.
 */
void
rlock_slotmap_configure(void)
{
	char		error[256];

	if (seed == NULL)
	{
		map = MemoryContextAllocZero(rlock_redis_context,
									 sizeof(RlockClusterMap));
		seed = MemoryContextAllocZero(rlock_redis_context,
									  sizeof(RlockServer));
		rlock_server_configure_node(seed, "", 0);
		topo = rlock_conn_create(seed, RLOCK_USE_CLUSTER, NULL,
								 &slotmap_hooks);
	}
	else
	{
		rlock_server_forget(seed);
		rlock_server_configure_node(seed, "", 0);
		rlock_router_reconfigure();
	}
	nseeds = 0;
	if (rlock_router_active())
	{
		nseeds = rlock_parse_nodes(rlock_nodes, seeds, RLOCK_MAX_NODES,
								   error, sizeof(error));
		if (nseeds <= 0)
		{
			nseeds = 0;
			rlock_router_map_failed("rlock.nodes names no Redis Cluster node to start from");
		}
	}
	seed_next = 0;
	use_slots = false;
	refresh_inflight = false;
	rlock_router_refresh_reset();
	slotmap_next_address();
}

/*
 * Ask for the map when due.
 */
void
rlock_slotmap_tick(TimestampTz now)
{
	TimestampTz due = rlock_router_refresh_due();

	if (rlock_router_active() && rlock_conn_ready(topo) && !refresh_inflight &&
		due != 0 && now >= due)
		slotmap_send_refresh(now);
}

TimestampTz
rlock_slotmap_next(void)
{
	if (rlock_router_active() && rlock_conn_ready(topo) &&
		!refresh_inflight && rlock_router_refresh_due() != 0)
		return rlock_router_refresh_due();
	return DT_NOEND;
}

/*
 * Does a node answer the map's questions now (and so will name the
 * replica a failover promotes)?
 */
bool
rlock_slotmap_answering(void)
{
	return rlock_conn_ready(topo);
}

/*
 * Is a primary's connection to be up (router.c says)?
 */
static bool
slotmap_node_wanted(RlockConn *conn)
{
	const char *why;

	return conn->hooks->wanted(conn, &why);
}

/*
 * What rlock_status() shows of the cluster: the node asked for the map,
 * how many primaries it named, whether the map is known (or why not), and
 * the primaries' command, subscriber and sync connections (the worst
 * state of each).
 */
void
rlock_slotmap_status(RlockWorkerStatus *st)
{
	int			cmd_state = RLOCK_CONN_READY;
	int			sub_state = RLOCK_CONN_READY;
	int			sync_state = -1;
	RlockNode **nodes;
	int			nnodes = rlock_router_nodes(&nodes);
	const char *why;
	int			i;

	st->cluster_primaries = rlock_router_primaries();
	st->cluster_map_known = rlock_router_map_known(&why);
	strlcpy(st->cluster_node, topo->state == RLOCK_CONN_READY ?
			seed->address : "", sizeof(st->cluster_node));
	snprintf(st->address, sizeof(st->address), "Redis Cluster (%d primaries)",
			 st->cluster_primaries);
	for (i = 0; i < nnodes; i++)
	{
		RlockConn **conn = nodes[i]->conn;

		if (!nodes[i]->primary)
			continue;
		/* those in use: a primary's connections are made when used */
		if (conn[RLOCK_USE_COMMAND]->state != RLOCK_CONN_DOWN ||
			slotmap_node_wanted(conn[RLOCK_USE_COMMAND]))
			cmd_state = Min(cmd_state, (int) conn[RLOCK_USE_COMMAND]->state);
		if (conn[RLOCK_USE_SUBSCRIBER]->state != RLOCK_CONN_DOWN ||
			slotmap_node_wanted(conn[RLOCK_USE_SUBSCRIBER]))
			sub_state = Min(sub_state, (int) conn[RLOCK_USE_SUBSCRIBER]->state);
		/* sync connections: those made, or needed now */
		if (conn[RLOCK_USE_SYNC]->state != RLOCK_CONN_DOWN ||
			(rlock_sync_replicas > 0 &&
			 slotmap_node_wanted(conn[RLOCK_USE_SYNC])))
			sync_state = Min(sync_state < 0 ? (int) RLOCK_CONN_READY : sync_state,
							 (int) conn[RLOCK_USE_SYNC]->state);
	}
	st->sync_state = sync_state;
	if (st->cluster_primaries == 0)
		cmd_state = sub_state = RLOCK_CONN_DOWN;
	st->cmd_state = cmd_state;
	st->sub_state = sub_state;
	if (!st->cluster_map_known && why[0] != '\0')
		strlcpy(st->last_error, why, sizeof(st->last_error));
}
