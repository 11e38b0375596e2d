/*-------------------------------------------------------------------------
 *
 * router.c
 *		Redis Cluster: the primaries, their connections, the route to the
 *		primary of a key's slot, and the redirections a cluster answers
 *		with.
 *
 * Each primary of the slot map (slotmap.c asks for it) is a node with its
 * own command, subscriber and sync connections, made and handshaken like
 * a standalone server's when the worker first routes something to them,
 * and closed after RLOCK_IDLE_MS without use (rlock_router_idle); a node
 * that serves no slot any more has them closed, and its commands are
 * answered as lost, which the worker sends again by the new map.  This
 * file makes the nodes and gives their connections its hooks, which pass
 * the worker's events on.  It also keeps when the map is to be asked for
 * again: soon after anything that says the map changed (a MOVED, a lost
 * primary, CLUSTERDOWN, a shard channel unsubscribed by Redis).
 *
 * The worker picks the connection (rlock_redis_route_key by a key's
 * slot); the replies a cluster adds are handled here, through the
 * connection's redirect hook, before the command's sender sees them:
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

#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/redis_int.h"

/* The map is asked for every RLOCK_REFRESH_MS (slotmap.c), and at most
 * every RLOCK_REFRESH_MIN_MS; every RLOCK_REFRESH_DEGRADED_MS while slots
 * have no primary (a failover under way: its promotion is to be found
 * soon) */
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

/* The uses rlock_redis_route_key() is told of are bits of RlockConnUse */
StaticAssertDecl(RLOCK_ROUTE_COMMAND == 1 << RLOCK_USE_COMMAND &&
				 RLOCK_ROUTE_SUBSCRIBER == 1 << RLOCK_USE_SUBSCRIBER &&
				 RLOCK_ROUTE_SYNC == 1 << RLOCK_USE_SYNC,
				 "RLOCK_ROUTE_* and RlockConnUse disagree");

static const RlockConnEvents *worker;	/* what the worker is told */

static RlockNode **nodes = NULL;
static int	nnodes = 0;
static int16 *owner = NULL;		/* by slot: index in nodes, -1 if none */
static int	nprimaries = 0;
static bool map_known = false;
static char map_error[RLOCK_DETAIL_LEN];	/* why no map is known */

/* When the map is to be asked for next (0: not before the routine
 * refresh), and when it was last */
static TimestampTz refresh_due = 0;
static TimestampTz refreshed_at = 0;

/* Commands answered as lost a moment later */
typedef struct Deferred
{
	RlockConn  *conn;
	RlockCmd   *cmd;
	TimestampTz due;
} Deferred;
static List *deferred = NIL;

/* The connection routes go to when no node serves the slot */
static RlockServer nowhere_server;
static RlockConn nowhere;
static RlockConn *nowhere_group[RLOCK_NDATA] = {&nowhere, &nowhere, &nowhere};

static RlockArgs *router_args = NULL;

static const RlockConnHooks node_hooks;

bool
rlock_router_active(void)
{
	return rlock_topology == RLOCK_TOPOLOGY_CLUSTER;
}

/*
 * Queue a command of the Redis layer's own, of one or two words
 * ("second" may be NULL), on "conn".  Returns it, or NULL if the
 * connection could not take it.
 */
RlockCmd *
rlock_router_send_own(RlockConn *conn, RlockReplyFn done, RlockShape shape,
					  Size size, const char *first, const char *second)
{
	RlockCmd   *cmd;

	Assert(size >= sizeof(RlockCmd));
	if (router_args == NULL)
		router_args = rlock_args_create(rlock_redis_context);
	rlock_args_reset(router_args);
	rlock_args_cstr(router_args, first);
	if (second != NULL)
		rlock_args_cstr(router_args, second);
	cmd = MemoryContextAllocZero(rlock_redis_context, size);
	cmd->internal = true;
	cmd->done = done;
	cmd->shape = shape;
	if (!rlock_conn_send(conn, cmd, router_args))
	{
		pfree(cmd);
		return NULL;
	}
	return cmd;
}

/*---- nodes ----*/

/*
 * A Redis Cluster node, with its data connections.
 */
static RlockNode *
router_node_create(const char *host, int port, int index)
{
	RlockNode  *n = MemoryContextAllocZero(rlock_redis_context,
										   sizeof(RlockNode));
	int			i;

	n->index = index;
	rlock_server_configure_node(&n->server, host, port);
	for (i = 0; i < RLOCK_NDATA; i++)
	{
		n->conn[i] = rlock_conn_create(&n->server, i, n->conn, &node_hooks);
		n->conn[i]->node = n;
	}
	return n;
}

/*
 * Has a node nothing going on: no connection, no command?
 */
static bool
router_node_idle(RlockNode *node)
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
static void
router_node_move(RlockNode *node, const char *host, int port)
{
	int			i;

	Assert(router_node_idle(node));
	rlock_server_set_address(&node->server, host, port);
	node->note_at = 0;
	for (i = 0; i < RLOCK_NDATA; i++)
	{
		rlock_conn_start_over(node->conn[i]);
		node->conn[i]->fence_id = 0;
		node->conn[i]->fence_run_id[0] = '\0';
		node->conn[i]->ever_ready = false;
	}
}

/*
 * The connection settings changed: every node takes them, keeping its
 * address.
 */
void
rlock_router_reconfigure(void)
{
	int			i;

	for (i = 0; i < nnodes; i++)
	{
		RlockNode  *node = nodes[i];
		char		host[RLOCK_CLUSTER_HOST_LEN];
		int			port = node->server.port;

		strlcpy(host, node->server.host, sizeof(host));
		rlock_server_forget(&node->server);
		rlock_server_configure_node(&node->server, host, port);
	}
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
	RlockNode  *n = router_known_node(host, port);
	int			i;

	if (n != NULL)
		return n;
	if (nnodes == RLOCK_ROUTER_MAX_NODES)
	{
		/* take over a node no longer used, with its connections */
		for (i = 0; i < nnodes; i++)
		{
			n = nodes[i];
			if (!n->primary && router_node_idle(n))
			{
				router_node_move(n, host, port);
				return n;
			}
		}
		return NULL;
	}
	n = router_node_create(host, port, nnodes);
	nodes[nnodes++] = n;
	return n;
}

/*
 * Every node: how many, and (*out) them.
 */
int
rlock_router_nodes(RlockNode ***out)
{
	*out = nodes;
	return nnodes;
}

int
rlock_router_primaries(void)
{
	return nprimaries;
}

/*
 * Is a slot map known?  If not, why (*why: "" when nothing says).
 */
bool
rlock_router_map_known(const char **why)
{
	*why = map_error;
	return map_known;
}

/*---- routes ----*/

/*
 * The connections of a slot's primary, those of "uses" (RLOCK_ROUTE_*)
 * counted as used now; or those that go nowhere when no primary is known
 * for it, with the reason in their error.
 */
RlockConn **
rlock_router_group(int slot, int uses)
{
	int			i = owner[slot];
	TimestampTz now;
	int			use;

	Assert(slot >= 0 && slot < RLOCK_CLUSTER_SLOTS);
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
		return nowhere_group;
	}
	Assert(i < nnodes);
	now = GetCurrentTimestamp();
	for (use = 0; use < RLOCK_NDATA; use++)
	{
		if (uses & (1 << use))
			nodes[i]->conn[use]->used_at = now;
	}
	return nodes[i]->conn;
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
		return rlock_router_group(0, RLOCK_ROUTE_COMMAND)[RLOCK_USE_COMMAND];
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

	if (!rlock_router_active())
		return;
	at = Max(at, now);
	if (refresh_due == 0 || at < refresh_due)
		refresh_due = at;
}

/*
 * Ask for the map at once, and again at once after that if need be: the
 * last answer could not be used (a server that knows no CLUSTER SHARDS,
 * or a CLUSTER SHARDS that only CLUSTER SLOTS can settle).
 */
void
rlock_router_refresh_again(void)
{
	rlock_router_refresh_soon();
	refreshed_at = 0;
}

TimestampTz
rlock_router_refresh_due(void)
{
	return refresh_due;
}

/*
 * The map was asked for at "now"; the routine refresh is due at "next".
 */
void
rlock_router_refreshing(TimestampTz now, TimestampTz next)
{
	refreshed_at = now;
	refresh_due = next;
}

/*
 * The settings changed: nothing is due until the map connection asks.
 */
void
rlock_router_refresh_reset(void)
{
	refresh_due = 0;
}

/*
 * No map could be had, and why, for requests routed nowhere and for
 * rlock_status().
 */
void
rlock_router_map_failed(const char *why)
{
	strlcpy(map_error, why, sizeof(map_error));
}

/*
 * A map that changed something: said in the log when the number of
 * primaries changed, or when slots have none.
 */
static void
router_log_map(int before, const char *through)
{
	int			unserved = 0;
	int			i;

	for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
		unserved += (owner[i] < 0);
	rlock_redis_status_touch();
	if (before != nprimaries || unserved > 0)
		ereport(LOG,
				(errmsg("rlock found %d primaries in the Redis Cluster through %s",
						nprimaries, through),
				 unserved > 0 ?
				 errdetail("%d hash slots have no primary.", unserved) : 0));
}

/*
 * Take a map read from a reply (asked "through" a node): the primaries it
 * names become nodes, the others stop being primaries (their connections
 * close at the next tick), and every slot gets its owner.
 */
void
rlock_router_apply(const RlockClusterMap *m, const char *through)
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
		router_log_map(before, through);
}

/*---- redirections ----*/

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
		rlock_router_send_own(target, router_asking_reply, RLOCK_SHAPE_OK,
							  sizeof(RlockCmd), "ASKING", NULL) == NULL)
		return false;
	cmd->asked = asking;
	cmd->redirects++;
	return rlock_conn_resend(target, cmd);
}

/*
 * The hash slot of a command the worker sent, from the command as it
 * went on the wire: its key's.  -1 for a command without a key.
 */
static int
router_cmd_slot(const RlockCmd *cmd)
{
	const char *key;
	int			keylen;

	if (!rlock_args_wire_key(cmd->wire, cmd->wirelen, &key, &keylen))
		return -1;
	return rlock_key_slot(key, keylen);
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
static bool
router_redirect(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	bool		moved = router_error_is(reply, "MOVED");
	bool		ask = router_error_is(reply, "ASK");
	char		host[RLOCK_CLUSTER_HOST_LEN];
	int			slot;
	int			port;
	RlockNode  *target;

	/* only the worker's commands, kept as sent, are taken over */
	if (!rlock_router_active() || conn->node == NULL || cmd->internal ||
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
	if (!rlock_cluster_parse_redirect(reply->str + (moved ? 6 : 4),
									  reply->len - (moved ? 6 : 4),
									  conn->server->host, &slot,
									  host, sizeof(host), &port) ||
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
	/*
	 * Its connection is made if it is not (a deferred command finds it
	 * ready when sent again).  A sync connection's command goes on the
	 * target's command connection while the target's sync connection is
	 * not ready, and its sender undoes a grant made there: that sync
	 * connection is wanted too, or a slot importing on a primary not used
	 * lately would never take a synced acquisition.
	 */
	target->conn[conn->use]->used_at = GetCurrentTimestamp();
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

/*---- the primaries' connections ----*/

/*
 * May a primary's connection be closed at once to free its descriptor:
 * nothing on the wire, no subscription that waiters need?
 */
static bool
router_reclaimable(RlockConn *conn)
{
	return conn->node != NULL && dlist_is_empty(&conn->inflight) &&
		!(conn->use == RLOCK_USE_SUBSCRIBER && worker->subscribed(conn));
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
static bool
router_idle(RlockConn *conn)
{
	if (!router_reclaimable(conn))
		return false;
	return conn->used_at == 0 ||
		GetCurrentTimestamp() >=
		TimestampTzPlusMilliseconds(conn->used_at, RLOCK_IDLE_MS);
}

/*
 * Should a primary's connection be up: the cluster is used, the node
 * serves slots (or is a primary without any yet), and the connection is
 * used or owes a fence?
 */
static bool
router_wanted(RlockConn *conn, const char **why)
{
	if (!rlock_router_active())
		return false;
	if (conn->node == NULL || !conn->node->primary)
		return false;
	/* a sync connection lost with acquisitions on the wire is made
	 * again for its fence, used or not (requests.c) */
	if (conn->fence_owed)
		return true;
	return !router_idle(conn);
}

static void
router_ready(RlockConn *conn)
{
	worker->ready(conn);
}

static void
router_lost(RlockConn *conn)
{
	/* a primary lost: it may have failed over (not one closed as idle) */
	if (!conn->idle_drop)
		rlock_router_refresh_soon();
	worker->lost(conn);
}

static void
router_message(RlockConn *conn, const char *channel, int channellen,
			   const char *payload, int payloadlen)
{
	worker->message(conn, channel, channellen, payload, payloadlen);
}

/*
 * Redis dropped a shard channel's subscription by itself: its slot left
 * this node, and the map says where it went.
 */
static void
router_unsubscribed(RlockConn *conn, const char *channel, int channellen)
{
	rlock_router_refresh_soon();
	worker->unsubscribed(conn, channel, channellen);
}

/*
 * The node answered as a replica: a failover moved the primary.  The
 * command is answered as lost, to be sent by the new map.
 */
static bool
router_demoted(RlockConn *conn)
{
	rlock_router_refresh_soon();
	return true;
}

static const RlockConnHooks node_hooks = {
	.ready = router_ready,
	.lost = router_lost,
	.wanted = router_wanted,
	.message = router_message,
	.unsubscribed = router_unsubscribed,
	.redirect = router_redirect,
	.demoted = router_demoted,
	.reclaimable = router_reclaimable
};

/*
 * A connection that is never made: where no node serves the slot.
 */
static bool
router_nowhere_wanted(RlockConn *conn, const char **why)
{
	return false;
}

static const RlockConnHooks nowhere_hooks = {
	.wanted = router_nowhere_wanted
};

/*---- life cycle ----*/

/*
 * The worker starts: the table of nodes, empty.  "events" is what the
 * worker is told about the primaries' connections.
 */
void
rlock_router_start(const RlockConnEvents *events)
{
	int			i;

	worker = events;
	nodes = MemoryContextAllocZero(rlock_redis_context,
								   sizeof(RlockNode *) * RLOCK_ROUTER_MAX_NODES);
	owner = MemoryContextAlloc(rlock_redis_context,
							   sizeof(int16) * RLOCK_CLUSTER_SLOTS);
	for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
		owner[i] = -1;
	strlcpy(nowhere_server.address, "(no primary)",
			sizeof(nowhere_server.address));
	nowhere.server = &nowhere_server;
	nowhere.group = nowhere_group;
	nowhere.hooks = &nowhere_hooks;
	nowhere.replicas = -1;
	nowhere.role = "command";
	nowhere.state = RLOCK_CONN_DOWN;
	nowhere.sock = PGINVALID_SOCKET;
	nowhere.pos = -1;
	dlist_init(&nowhere.inflight);
}

/*
 * Answer the commands deferred that are due: all of them when the
 * cluster is no longer used.
 */
void
rlock_router_tick(TimestampTz now)
{
	ListCell   *lc;
	List	   *due = NIL;

	/* answer first, then call: a sender may defer more */
	foreach(lc, deferred)
	{
		Deferred   *d = (Deferred *) lfirst(lc);

		if (d->due <= now || !rlock_router_active())
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

	if (deferred != NIL && !rlock_router_active())
		return 0;
	foreach(lc, deferred)
		next = Min(next, ((Deferred *) lfirst(lc))->due);
	return next;
}
