/*-------------------------------------------------------------------------
 *
 * router.c
 *		Redis Cluster: the slot map the worker routes by, the primaries'
 *		connections, and the redirections a cluster answers with.
 *
 * With rlock.topology = cluster, a connection of its own (role
 * "cluster") goes to one node at a time, starting with the seeds of
 * rlock.nodes, and asks CLUSTER SHARDS (CLUSTER SLOTS from a server
 * before 7.0) for the slot map: at once when it is made, every
 * RLOCK_REFRESH_MS, and soon after anything that says the map changed (a
 * MOVED, a lost primary, CLUSTERDOWN, a shard channel unsubscribed by
 * Redis).  Each primary of the map is a node with its own command and
 * subscriber connections, made and handshaken like a standalone
 * server's when the worker first routes something to them, and closed
 * after RLOCK_IDLE_MS without use (rlock_router_idle); a node that serves
 * no slot any more has them closed, and its commands are answered as
 * lost, which the worker sends again by the new map.  A map with more
 * primaries than the worker may hold sockets is refused.
 *
 * The worker picks the connection (rlock_redis_route by a key's slot);
 * the replies a cluster adds are handled here, before the command's
 * sender sees them:
 *
 *	MOVED	the slot's owner is updated, a refresh asked for, and the
 *			command sent again as it was to the new owner, right away, so
 *			that commands keep the order they were sent in;
 *	ASK		the command is sent once behind ASKING to the node named,
 *			the map is left as it is;
 *	TRYAGAIN, CLUSTERDOWN, an ASK or MOVED to a node not connected,
 *			more than RLOCK_MAX_REDIRECTS redirections:
 *			the command is answered as lost after RLOCK_DEFER_MS (it did
 *			not run), and the worker's usual bounds apply to the request
 *			(rlock.command_timeout + rlock.connect_timeout, then 58030),
 *			with the error Redis gave in its message.
 *
 * Every redirection is untrusted input: a slot out of range, a port out
 * of range or a host name that is not one is refused, and so is one for
 * another slot than the command's: the reply goes to the sender as the
 * error it is.  A redirection is followed only to a primary of the
 * current map, which came from a seed of rlock.nodes or from a node such
 * a map named: a node that does not keep to the protocol cannot send
 * rlock's password and locks to an address of its choice.  A redirection
 * to any other node is answered as lost a moment later, and the map is
 * asked for again: once a map names the node, commands go there.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/router.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "nodes/pg_list.h"
#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/redis_int.h"

/* The map is asked for this often, and at most every RLOCK_REFRESH_MIN_MS;
 * every RLOCK_REFRESH_DEGRADED_MS while slots have no primary (a failover
 * under way: its promotion is to be found soon) */
#define RLOCK_REFRESH_MS		5000
#define RLOCK_REFRESH_MIN_MS	100
#define RLOCK_REFRESH_DEGRADED_MS	250

/* A command is redirected at most this often before it counts as lost */
#define RLOCK_MAX_REDIRECTS		5

/* A command the cluster could not take now is answered as lost after
 * this long, so that resending it is no hot loop */
#define RLOCK_DEFER_MS			20

/* A refusal of a slot's node is named in failure messages this long */
#define RLOCK_NOTE_MS			10000

/* A primary's connections are closed after this long without use (the
 * watchdog, every third of rlock.watchdog_timeout, keeps those of the
 * locks it renews) */
#define RLOCK_IDLE_MS			60000

/* Nodes kept: primaries, and nodes redirections named */
#define RLOCK_ROUTER_MAX_NODES	(2 * RLOCK_CLUSTER_MAX_NODES)


static RlockNode **nodes = NULL;
static int	nnodes = 0;
static int16 *owner = NULL;		/* by slot: index in nodes, -1 if none */
static RlockClusterMap *map = NULL; /* the latest reply, parsed */
static int	nprimaries = 0;
static bool map_known = false;

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
static TimestampTz refresh_due = 0;
static TimestampTz refreshed_at = 0;
static char map_error[RLOCK_DETAIL_LEN];
static bool map_too_big_logged = false;

/* Commands answered as lost a moment later */
typedef struct Deferred
{
	RlockConn  *conn;
	RlockCmd   *cmd;
	TimestampTz due;
} Deferred;
static List *deferred = NIL;

/* Our own commands: the map query, ASKING, PUBSUB SHARDNUMSUB */
typedef struct RouterCmd
{
	RlockCmd	cmd;
	bool		shards;			/* CLUSTER SHARDS, not SLOTS */
} RouterCmd;

/* The connection routes go to when no node serves the slot */
static RlockServer nowhere_server;
static RlockConn nowhere;
static RlockConn *nowhere_group[RLOCK_NDATA] = {&nowhere, &nowhere, &nowhere};

static RlockArgs *router_args = NULL;

/*
 * Queue one of our own commands of two words ("second" may be NULL) on
 * "conn".  Returns it, or NULL if the connection could not take it.
 */
static RouterCmd *
router_send_own(RlockConn *conn, RlockReplyFn done, RlockShape shape,
				const char *first, const char *second)
{
	RouterCmd  *rc;

	if (router_args == NULL)
		router_args = rlock_args_create(rlock_redis_context);
	rlock_args_reset(router_args);
	rlock_args_cstr(router_args, first);
	if (second != NULL)
		rlock_args_cstr(router_args, second);
	rc = MemoryContextAllocZero(rlock_redis_context, sizeof(RouterCmd));
	rc->cmd.internal = true;
	rc->cmd.done = done;
	rc->cmd.shape = shape;
	if (!rlock_conn_send(conn, &rc->cmd, router_args))
	{
		pfree(rc);
		return NULL;
	}
	return rc;
}

static void router_send_refresh(TimestampTz now);

/*---- nodes ----*/

static bool
router_active(void)
{
	return rlock_topology == RLOCK_TOPOLOGY_CLUSTER;
}

bool
rlock_redis_cluster(void)
{
	return router_active();
}

/*
 * The node at host:port, if known.
 */
static RlockNode *
router_known_node(const char *host, int port)
{
	int			i;

	for (i = 0; i < nnodes; i++)
	{
		if (nodes[i]->server.port == port &&
			strcmp(nodes[i]->server.host, host) == 0)
			return nodes[i];
	}
	return NULL;
}

/*
 * The node at host:port, made if new.  NULL if the table is full of
 * nodes still in use.
 */
static RlockNode *
router_node(const char *host, int port)
{
	RlockNode  *n;
	int			i;

	for (i = 0; i < nnodes; i++)
	{
		if (nodes[i]->server.port == port &&
			strcmp(nodes[i]->server.host, host) == 0)
			return nodes[i];
	}
	if (nnodes == RLOCK_ROUTER_MAX_NODES)
	{
		/* take over a node no longer used, with its connections */
		for (i = 0; i < nnodes; i++)
		{
			n = nodes[i];
			if (!n->primary && rlock_node_idle(n))
			{
				rlock_node_move(n, host, port);
				return n;
			}
		}
		return NULL;
	}
	n = rlock_node_create(host, port, nnodes);
	nodes[nnodes++] = n;
	return n;
}

/*
 * The connection of a slot's primary for "use", or the one that goes
 * nowhere when no primary is known for it.
 */
static RlockConn *
router_slot_conn(int slot, RlockConnUse use)
{
	int			i = owner[slot];

	if (i >= 0)
		nodes[i]->conn[use]->used_at = GetCurrentTimestamp();
	if (i < 0)
	{
		if (!map_known)
			snprintf(nowhere.error, sizeof(nowhere.error),
					 "the Redis Cluster's slot map is not known yet: %s",
					 map_error[0] ? map_error : "no node answered yet");
		else
			snprintf(nowhere.error, sizeof(nowhere.error),
					 "no primary of the Redis Cluster serves hash slot %d",
					 slot);
		return &nowhere;
	}
	return nodes[i]->conn[use];
}

RlockConn *
rlock_router_route(const char *key, int keylen, RlockConnUse use)
{
	return router_slot_conn(rlock_key_slot(key, keylen), use);
}

/*
 * A command connection that is ready, for commands without a key: the
 * first primary's that is, or else the first primary's.
 */
RlockConn *
rlock_router_any(void)
{
	RlockConn  *first = NULL;
	int			i;

	for (i = 0; i < nnodes; i++)
	{
		RlockConn  *c = nodes[i]->conn[RLOCK_USE_COMMAND];

		if (!nodes[i]->primary)
			continue;
		if (rlock_conn_ready(c))
		{
			first = c;
			break;
		}
		if (first == NULL)
			first = c;
	}
	if (first == NULL)
		return router_slot_conn(0, RLOCK_USE_COMMAND);
	first->used_at = GetCurrentTimestamp();
	return first;
}

/*
 * What the cluster said last about the node of "conn", when recent: a
 * CLUSTERDOWN, a TRYAGAIN.  NULL if nothing.
 */
const char *
rlock_redis_route_note(RlockConn *conn)
{
	if (conn->node == NULL || conn->node->note_at == 0 ||
		GetCurrentTimestamp() >
		TimestampTzPlusMilliseconds(conn->node->note_at, RLOCK_NOTE_MS))
		return NULL;
	return conn->node->note;
}

/*---- the map ----*/

/*
 * Ask for the map soon: at once if the last answer is old enough.
 */
void
rlock_router_refresh_soon(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz at = TimestampTzPlusMilliseconds(refreshed_at,
												 RLOCK_REFRESH_MIN_MS);

	if (!router_active())
		return;
	at = Max(at, now);
	if (refresh_due == 0 || at < refresh_due)
		refresh_due = at;
}

/*
 * Take a map read from a reply: the primaries it names become nodes, the
 * others stop being primaries (their connections close at the next
 * tick), and every slot gets its owner.
 */
static void
router_apply(const RlockClusterMap *m)
{
	int16		index[RLOCK_CLUSTER_MAX_NODES];
	bool		was_primary[RLOCK_ROUTER_MAX_NODES];
	int			before = nprimaries;
	int			nnodes_before = nnodes;
	bool		changed = !map_known;
	int			i;

	for (i = 0; i < nnodes; i++)
	{
		was_primary[i] = nodes[i]->primary;
		nodes[i]->primary = false;
	}
	for (i = 0; i < m->nnodes; i++)
	{
		RlockNode  *n = router_node(m->node[i].host, m->node[i].port);

		index[i] = n ? n->index : -1;
		if (n != NULL)
			n->primary = true;
	}
	nprimaries = 0;
	for (i = 0; i < nnodes; i++)
	{
		/* a node made above (i >= the count before) was no primary */
		if (nodes[i]->primary != (i < nnodes_before && was_primary[i]))
			changed = true;
		if (nodes[i]->primary)
			nprimaries++;
	}
	for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
	{
		int16		o = m->owner[i] >= 0 ? index[m->owner[i]] : -1;

		if (owner[i] != o)
			changed = true;
		owner[i] = o;
	}
	map_known = true;
	map_error[0] = '\0';
	map_too_big_logged = false;
	for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
	{
		if (owner[i] < 0)
		{
			refresh_due = TimestampTzPlusMilliseconds(refreshed_at,
													  RLOCK_REFRESH_DEGRADED_MS);
			break;
		}
	}
	if (changed)
	{
		int			unserved = 0;

		for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
			unserved += (owner[i] < 0);
		rlock_redis_status_touch();
		if (before != nprimaries || unserved > 0)
			ereport(LOG,
					(errmsg("rlock found %d primaries in the Redis Cluster through %s",
							nprimaries, seed->address),
					 unserved > 0 ?
					 errdetail("%d hash slots have no primary.", unserved) : 0));
	}
}

/*
 * How many primaries of a map serve slots (those without any yet need no
 * connection until a slot migrates to them).
 */
static int
router_serving(const RlockClusterMap *m)
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

static void
router_refresh_reply(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	RouterCmd  *rc = (RouterCmd *) cmd;
	char		error[256];
	bool		ok;

	refresh_inflight = false;
	if (reply == NULL || conn->failed)
	{
		pfree(rc);
		return;
	}
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		/*
		 * Redis 6 knows CLUSTER SLOTS only: "ERR Unknown subcommand or
		 * wrong number of arguments for 'SHARDS'. Try CLUSTER HELP." (7.0
		 * words it "ERR unknown subcommand 'shards'. ...")
		 */
		if (rc->shards && strncmp(reply->str, "ERR ", 4) == 0 &&
			strstr(reply->str, "nknown subcommand") != NULL)
		{
			use_slots = true;
			rlock_router_refresh_soon();
			refreshed_at = 0;
		}
		else
		{
			snprintf(map_error, sizeof(map_error),
					 "%s refused to give the slot map: %.200s",
					 conn->server->address, reply->str);
			rlock_conn_give_up(conn, map_error);
		}
		pfree(rc);
		return;
	}
	if (rc->shards)
		ok = rlock_cluster_map_from_shards(reply,
										   conn->server->tls != RLOCK_TLS_OFF,
										   conn->server->host, map,
										   error, sizeof(error));
	else
		ok = rlock_cluster_map_from_slots(reply, conn->server->host, map,
										  error, sizeof(error));
	if (!ok && rc->shards &&
		strcmp(error, RLOCK_CLUSTER_SHARD_TWO_PRIMARIES) == 0)
	{
		/*
		 * A node that was a replica and now serves slots of its own may
		 * keep its old shard's id (seen with Redis 8): CLUSTER SHARDS then
		 * lists two primaries up for one set of slots, and only CLUSTER
		 * SLOTS says which serves which.  Asked at once, that time.
		 */
		pfree(rc);
		slots_once = true;
		rlock_router_refresh_soon();
		refreshed_at = 0;
		return;
	}
	pfree(rc);
	if (ok && router_serving(map) > max_safe_fds / 3 - 1)
	{
		/*
		 * Each primary in use needs a connection, and the map's one more:
		 * more primaries than descriptors would fail keys at random.
		 */
		snprintf(map_error, sizeof(map_error),
				 "the Redis Cluster has %d primaries, more than the %d connections rlock may hold open besides the map's: raise max_files_per_process (rlock may use a third of the descriptors it leaves free) or the server's open files limit",
				 router_serving(map), max_safe_fds / 3 - 1);
		rlock_redis_status_error(map_error);
		if (!map_too_big_logged)
			ereport(WARNING,
					(errmsg("rlock does not use the slot map of the Redis Cluster at %s",
							conn->server->address),
					 errdetail_internal("%s", map_error)));
		map_too_big_logged = true;
		return;
	}
	if (!ok)
	{
		char		detail[RLOCK_DETAIL_LEN];

		snprintf(detail, sizeof(detail), "a slot map rlock does not accept: %s",
				 error);
		snprintf(map_error, sizeof(map_error), "%s sent %s",
				 conn->server->address, detail);
		rlock_conn_violation(conn, RLOCK_VIOLATION_SHAPE, detail);
		return;
	}
	router_apply(map);
}

static void
router_send_refresh(TimestampTz now)
{
	bool		slots = use_slots || slots_once;
	RouterCmd  *rc = router_send_own(topo, router_refresh_reply,
									 RLOCK_SHAPE_ARRAY, "CLUSTER",
									 slots ? "SLOTS" : "SHARDS");

	if (rc == NULL)
		return;
	slots_once = false;
	rc->shards = !slots;
	refresh_inflight = true;
	refreshed_at = now;
	refresh_due = TimestampTzPlusMilliseconds(now, RLOCK_REFRESH_MS);
}

/*
 * Point the map connection at the next address: the seeds, then the
 * primaries known.
 */
static void
router_next_address(void)
{
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
router_shardnumsub_reply(RlockConn *conn, RlockCmd *cmd,
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
 * Ask whether the cluster knows sharded pub/sub, as Redisson does when it
 * connects: PUBSUB SHARDNUMSUB answered (Redis 7.0 and later) means yes.
 */
static void
router_send_shardnumsub(void)
{
	(void) router_send_own(topo, router_shardnumsub_reply, RLOCK_SHAPE_ARRAY,
						   "PUBSUB", "SHARDNUMSUB");
}

/*
 * The namespaces unlock messages use now (RLOCK_PUBSUB_*): always classic
 * outside a cluster, as Redisson; in one, as rlock.cluster_pubsub says.
 */
int
rlock_redis_pubsub(void)
{
	if (!router_active())
		return RLOCK_PUBSUB_CLASSIC;
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

/*---- connection events ----*/

void
rlock_router_conn_ready(RlockConn *conn)
{
	if (conn != topo)
		return;
	router_send_shardnumsub();
	router_send_refresh(GetCurrentTimestamp());
}

void
rlock_router_conn_lost(RlockConn *conn)
{
	if (conn == topo)
	{
		refresh_inflight = false;
		router_next_address();
		return;
	}
	/* a primary lost: it may have failed over (not one closed as idle) */
	if (!conn->idle_drop)
		rlock_router_refresh_soon();
}

/*---- redirections ----*/

/*
 * Read "<slot> <host>:<port>" after MOVED or ASK.  The host may be empty
 * (Redis does not know the address it is reached by: the one the reply
 * came from is meant) and may hold colons (IPv6).
 */
static bool
router_parse_redirect(const char *s, int len, const char *from_host,
					  int *slot, char *host, size_t hostsize, int *port)
{
	const char *end = s + len;
	const char *p = s;
	const char *colon = NULL;
	const char *q;
	long		v = 0;

	if (p >= end || !isdigit((unsigned char) *p))
		return false;
	while (p < end && isdigit((unsigned char) *p) && v < RLOCK_CLUSTER_SLOTS)
		v = v * 10 + (*p++ - '0');
	if (v >= RLOCK_CLUSTER_SLOTS || p >= end || *p != ' ')
		return false;
	*slot = (int) v;
	p++;
	for (q = p; q < end; q++)
	{
		if (*q == ':')
			colon = q;
		else if (*q <= ' ' || *q > '~')
			return false;
	}
	if (colon == NULL || colon - p >= (long) hostsize || colon + 1 == end)
		return false;
	v = 0;
	for (q = colon + 1; q < end; q++)
	{
		if (!isdigit((unsigned char) *q) || v > 65535)
			return false;
		v = v * 10 + (*q - '0');
	}
	if (v < 1 || v > 65535)
		return false;
	*port = (int) v;
	if (colon == p)
		strlcpy(host, from_host, hostsize);
	else
	{
		memcpy(host, p, colon - p);
		host[colon - p] = '\0';
	}
	return true;
}

/*
 * Answer "cmd" as lost in a moment.  "note" is remembered for the node's
 * failure messages.
 */
static void
router_defer(RlockConn *conn, RlockCmd *cmd, const char *note)
{
	MemoryContext old = MemoryContextSwitchTo(rlock_redis_context);
	Deferred   *d = palloc(sizeof(Deferred));

	d->conn = conn;
	d->cmd = cmd;
	d->due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										 RLOCK_DEFER_MS);
	cmd->unsent = true;			/* no node ran it */
	deferred = lappend(deferred, d);
	MemoryContextSwitchTo(old);
	if (note != NULL && conn->node != NULL)
	{
		strlcpy(conn->node->note, note, sizeof(conn->node->note));
		conn->node->note_at = GetCurrentTimestamp();
	}
}

static void
router_asking_reply(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	pfree(cmd);
}

/*
 * The connection of "node" a command redirected from a connection of
 * "use" goes to: the same use, but for a sync connection not made there
 * (a node without replicas under auto), the command connection, where
 * the sender finds that no replica is to be waited for.
 */
static RlockConn *
router_target_conn(RlockNode *node, RlockConnUse use)
{
	if (use == RLOCK_USE_SYNC && !rlock_conn_ready(node->conn[use]))
		return node->conn[RLOCK_USE_COMMAND];
	return node->conn[use];
}

/*
 * Send "cmd" again on "target", behind ASKING if "asking".  False if the
 * target cannot take it now.
 */
static bool
router_resend(RlockConn *target, RlockCmd *cmd, bool asking)
{
	if (!rlock_conn_ready(target) || cmd->wire == NULL)
		return false;
	if (asking &&
		router_send_own(target, router_asking_reply, RLOCK_SHAPE_OK,
						"ASKING", NULL) == NULL)
		return false;
	cmd->asked = asking;
	cmd->redirects++;
	return rlock_conn_resend(target, cmd);
}

static bool
router_word_is(const char *arg, int len, const char *word)
{
	return len == (int) strlen(word) && pg_strncasecmp(arg, word, len) == 0;
}

/*
 * The hash slot of a command the worker sent, from the command as it
 * went on the wire (an array of bulk strings): its first key's, that is
 * EVALSHA's first key when it has keys, else the channel of the
 * commands that name one.  -1 for a command without a key.
 */
static int
router_cmd_slot(const RlockCmd *cmd)
{
	const char *p = cmd->wire;
	const char *end = cmd->wire + cmd->wirelen;
	const char *arg[4];
	int			len[4];
	long		nargs;
	int			i;

	if (p == NULL || p >= end || *p != '*')
		return -1;
	nargs = strtol(p + 1, NULL, 10);
	p = memchr(p, '\n', end - p);
	for (i = 0; i < 4 && i < nargs && p != NULL; i++)
	{
		const char *q;

		p++;
		if (p >= end || *p != '$')
			return -1;
		len[i] = (int) strtol(p + 1, NULL, 10);
		q = memchr(p, '\n', end - p);
		if (q == NULL || len[i] < 0 || len[i] > end - (q + 1))
			return -1;
		arg[i] = q + 1;
		p = arg[i] + len[i] + 1;	/* the \n after the \r */
		if (p > end)
			return -1;
	}
	if (i >= 4 && router_word_is(arg[0], len[0], "EVALSHA"))
		return (len[2] == 1 && arg[2][0] == '0') ? -1 :
			rlock_key_slot(arg[3], len[3]);
	if (i >= 2 &&
		(router_word_is(arg[0], len[0], "SUBSCRIBE") ||
		 router_word_is(arg[0], len[0], "UNSUBSCRIBE") ||
		 router_word_is(arg[0], len[0], "SSUBSCRIBE") ||
		 router_word_is(arg[0], len[0], "SUNSUBSCRIBE") ||
		 router_word_is(arg[0], len[0], "PUBLISH") ||
		 router_word_is(arg[0], len[0], "SPUBLISH")))
		return rlock_key_slot(arg[1], len[1]);
	return -1;
}

static bool
router_error_is(const RlockReply *reply, const char *code)
{
	size_t		len = strlen(code);

	return reply->len >= (int) len &&
		strncmp(reply->str, code, len) == 0 &&
		(reply->str[len] == ' ' || reply->str[len] == '\0');
}

/*
 * An error reply to "cmd" on a data connection of the cluster: a
 * redirection, or a state of the cluster that passes.  True if this took
 * the command over (sent it elsewhere, or will answer it as lost); false
 * hands the reply to its sender.
 */
bool
rlock_router_redirect(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	bool		moved = router_error_is(reply, "MOVED");
	bool		ask = router_error_is(reply, "ASK");
	char		host[RLOCK_CLUSTER_HOST_LEN];
	int			slot;
	int			port;
	RlockNode  *target;

	/* only the worker's commands, kept as sent, are taken over */
	if (!router_active() || conn->node == NULL || cmd->internal ||
		cmd->wire == NULL)
		return false;
	if (router_error_is(reply, "TRYAGAIN") ||
		router_error_is(reply, "CLUSTERDOWN"))
	{
		rlock_count(RLOCK_STAT_CLUSTER_RETRIES, 1);
		if (router_error_is(reply, "CLUSTERDOWN"))
			rlock_router_refresh_soon();
		router_defer(conn, cmd, reply->str);
		return true;
	}
	if (!moved && !ask)
		return false;
	if (!router_parse_redirect(reply->str + (moved ? 6 : 4),
							   reply->len - (moved ? 6 : 4),
							   conn->server->host, &slot, host, sizeof(host),
							   &port) ||
		slot != router_cmd_slot(cmd))
		return false;			/* the sender sees what was sent */
	rlock_count(moved ? RLOCK_STAT_CLUSTER_MOVED : RLOCK_STAT_CLUSTER_ASK, 1);
	target = router_known_node(host, port);
	if (target == NULL || !target->primary)
	{
		/* nothing goes there before a map names it */
		rlock_router_refresh_soon();
		router_defer(conn, cmd, "a redirection to a node the slot map does not name");
		return true;
	}
	/* its connection is made if it is not (a deferred command finds it
	 * ready when sent again) */
	router_target_conn(target, conn->use)->used_at = GetCurrentTimestamp();
	if (moved)
	{
		/* the slot's owner now, until the map says otherwise */
		owner[slot] = target->index;
		rlock_router_refresh_soon();
	}

	/*
	 * A second ASK for the same command: the migration moves on; later.
	 * A sync connection's command goes to the target's sync connection:
	 * its sender sees it answered there, and waits for replicas there.
	 */
	if (cmd->redirects >= RLOCK_MAX_REDIRECTS || (ask && cmd->asked) ||
		!router_resend(router_target_conn(target, conn->use), cmd, ask))
		router_defer(conn, cmd, reply->str);
	return true;
}

/*---- life cycle ----*/

/*
 * The settings changed (or the worker starts): seeds from rlock.nodes.
 * The map and its nodes stay: a new map replaces them.
 */
void
rlock_router_configure(void)
{
	char		error[256];
	int			i;

	if (nodes == NULL)
	{
		nodes = MemoryContextAllocZero(rlock_redis_context,
									   sizeof(RlockNode *) *
									   RLOCK_ROUTER_MAX_NODES);
		owner = MemoryContextAlloc(rlock_redis_context,
								   sizeof(int16) * RLOCK_CLUSTER_SLOTS);
		for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
			owner[i] = -1;
		map = MemoryContextAllocZero(rlock_redis_context,
									 sizeof(RlockClusterMap));
		seed = MemoryContextAllocZero(rlock_redis_context,
									  sizeof(RlockServer));
		rlock_server_configure_node(seed, "", 0);
		topo = rlock_conn_create(seed, RLOCK_USE_CLUSTER);
		nowhere_server.address[0] = '\0';
		strlcpy(nowhere_server.address, "(no primary)",
				sizeof(nowhere_server.address));
		nowhere.server = &nowhere_server;
		nowhere.group = nowhere_group;
		nowhere.replicas = -1;
		nowhere.role = "command";
		nowhere.state = RLOCK_CONN_DOWN;
		nowhere.sock = PGINVALID_SOCKET;
		nowhere.pos = -1;
		dlist_init(&nowhere.inflight);
	}
	else
	{
		rlock_server_forget(seed);
		rlock_server_configure_node(seed, "", 0);
		for (i = 0; i < nnodes; i++)
			rlock_node_reconfigure(nodes[i]);
	}
	nseeds = 0;
	if (router_active())
	{
		nseeds = rlock_parse_nodes(rlock_nodes, seeds, RLOCK_MAX_NODES,
								   error, sizeof(error));
		if (nseeds <= 0)
		{
			nseeds = 0;
			snprintf(map_error, sizeof(map_error),
					 "rlock.nodes names no Redis Cluster node to start from");
		}
	}
	seed_next = 0;
	use_slots = false;
	refresh_inflight = false;
	refresh_due = 0;
	router_next_address();
}

bool
rlock_router_wanted(RlockConn *conn)
{
	if (!router_active())
		return false;
	if (conn == topo)
		return nseeds + nprimaries > 0;
	if (conn->node == NULL || !conn->node->primary)
		return false;
	/* a sync connection lost with acquisitions on the wire is made
	 * again for its fence, used or not (requests.c) */
	if (conn->fence_owed)
		return true;
	return !rlock_router_idle(conn);
}

/*
 * May a primary's connection be closed at once to free its descriptor:
 * nothing on the wire, no subscription that waiters need?
 */
bool
rlock_router_reclaimable(RlockConn *conn)
{
	return conn->node != NULL && dlist_is_empty(&conn->inflight) &&
		!(conn->use == RLOCK_USE_SUBSCRIBER && rlock_conn_subscribed(conn));
}

/*
 * Is a connection to a primary idle: made, or to be made, for nothing
 * now?  A primary's connections are made when a key of its slots is used
 * and closed once nothing has gone there for RLOCK_IDLE_MS: not while a
 * command is on the wire, nor a subscriber that waiters need.  So the
 * worker holds the sockets of the primaries it works with, not of every
 * primary of the cluster (the file descriptors it may hold are few: see
 * transport.c).
 */
bool
rlock_router_idle(RlockConn *conn)
{
	if (!rlock_router_reclaimable(conn))
		return false;
	return conn->used_at == 0 ||
		GetCurrentTimestamp() >=
		TimestampTzPlusMilliseconds(conn->used_at, RLOCK_IDLE_MS);
}

void
rlock_router_tick(TimestampTz now)
{
	ListCell   *lc;
	List	   *due = NIL;

	if (router_active() && rlock_conn_ready(topo) && !refresh_inflight &&
		refresh_due != 0 && now >= refresh_due)
		router_send_refresh(now);

	/* answer first, then call: a sender may defer more; all of them when
	 * the cluster is no longer used */
	foreach(lc, deferred)
	{
		Deferred   *d = (Deferred *) lfirst(lc);

		if (d->due <= now || !router_active())
		{
			due = lappend(due, d);
			deferred = foreach_delete_current(deferred, lc);
		}
	}
	foreach(lc, due)
	{
		Deferred   *d = (Deferred *) lfirst(lc);

		rlock_conn_answer(d->conn, d->cmd, NULL);
		pfree(d);
	}
	list_free(due);
}

TimestampTz
rlock_router_next(void)
{
	TimestampTz next = DT_NOEND;
	ListCell   *lc;

	if (deferred != NIL && !router_active())
		return 0;
	if (!router_active())
		return next;
	if (rlock_conn_ready(topo) && !refresh_inflight && refresh_due != 0)
		next = refresh_due;
	foreach(lc, deferred)
		next = Min(next, ((Deferred *) lfirst(lc))->due);
	return next;
}

/*
 * Every node, for the connection loops of conn.c.
 */
int
rlock_router_nodes(RlockNode ***out)
{
	*out = nodes;
	return nnodes;
}

RlockConn *
rlock_router_topology_conn(void)
{
	return topo;
}

/*
 * What rlock_status() shows of the cluster: the node asked for the map,
 * and the primaries' command and subscriber connections (the worst state
 * of each, and since when the worst has been so).
 */
void
rlock_router_status(RlockWorkerStatus *st)
{
	int			cmd_state = RLOCK_CONN_READY;
	int			sub_state = RLOCK_CONN_READY;
	int			sync_state = -1;
	int			i;

	st->cluster_primaries = nprimaries;
	st->cluster_map_known = map_known;
	strlcpy(st->cluster_node, topo->state == RLOCK_CONN_READY ?
			seed->address : "", sizeof(st->cluster_node));
	snprintf(st->address, sizeof(st->address), "Redis Cluster (%d primaries)",
			 nprimaries);
	for (i = 0; i < nnodes; i++)
	{
		RlockConn  *c = nodes[i]->conn[RLOCK_USE_COMMAND];
		RlockConn  *s = nodes[i]->conn[RLOCK_USE_SUBSCRIBER];

		if (!nodes[i]->primary)
			continue;
		/* those in use: a primary's connections are made when used */
		if (c->state != RLOCK_CONN_DOWN || rlock_router_wanted(c))
			cmd_state = Min(cmd_state, (int) c->state);
		if (s->state != RLOCK_CONN_DOWN || rlock_router_wanted(s))
			sub_state = Min(sub_state, (int) s->state);
		/* sync connections: those made, or needed now */
		if (nodes[i]->conn[RLOCK_USE_SYNC]->state != RLOCK_CONN_DOWN ||
			(rlock_sync_replicas > 0 &&
			 rlock_router_wanted(nodes[i]->conn[RLOCK_USE_SYNC])))
			sync_state = Min(sync_state < 0 ? (int) RLOCK_CONN_READY : sync_state,
							 (int) nodes[i]->conn[RLOCK_USE_SYNC]->state);
	}
	st->sync_state = sync_state;
	if (nprimaries == 0)
		cmd_state = sub_state = RLOCK_CONN_DOWN;
	st->cmd_state = cmd_state;
	st->sub_state = sub_state;
	if (!map_known && map_error[0] != '\0')
		strlcpy(st->last_error, map_error, sizeof(st->last_error));
}
