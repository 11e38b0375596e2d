/*-------------------------------------------------------------------------
 *
 * conn.c
 *		The life of one Redis connection: made, handed to the handshake,
 *		ready, kept within its deadlines, and lost.
 *
 * A connection is a non-blocking socket with a transport (plain or TLS,
 * see transport.c and tls.c), an output buffer, a reader (reply.c) and
 * the list of its commands in send order (wire.c moves them).  Whoever
 * makes one (the Sentinels, a Redis Cluster's router and map, the
 * topology for the worker's) gives it a table of hooks, RlockConnHooks:
 * this file tells them through it that the connection is ready or lost,
 * and asks nothing of their files.  The handshake that makes a
 * connection READY is handshake.c's, registered here when the worker
 * starts; it calls rlock_conn_became_ready() when it is over.
 *
 * Life of a connection: DOWN -> (RESOLVING) -> CONNECTING -> (SECURING,
 * the TLS handshake) -> HANDSHAKE (AUTH, SELECT, names, scripts: see
 * handshake.c) -> READY, and back to DOWN on any failure; each step
 * asserts the state it leaves.  Connecting and the handshakes must end
 * within rlock.connect_timeout; a READY connection whose oldest command
 * has waited longer than rlock.command_timeout is dropped, and so is one
 * that has had part of a reply for that long, whether a command waits or
 * not.  Reconnection uses exponential back-off from 50 ms, capped at one
 * second; the back-off starts over only after a connection stayed up for
 * a while, so a server that accepts connections and then drops them is
 * not hammered.  Each outage is logged once, and its end once.
 *
 * Reply functions and hooks never close a connection: they mark it
 * failed, and it is closed at the top of the loop (loop.c), or in
 * rlock_redis_reload(), where no reply is being handled.  Every
 * connection made is kept here, in the order made, for the loop.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

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

/* Every connection ever made, in the order made */
static RlockConn **all = NULL;
static int	nall = 0;
static int	maxall = 0;

/* Counts the sockets opened and closed, for the loop's wait set */
static uint64 sockets_version = 0;

/* Starts the handshake of a connection whose transport is open */
static RlockHandshakeFn handshake_begin = NULL;

/* Role names for messages, by RlockConnUse */
static const char *const conn_roles[RLOCK_NUSES] = {
	"command", "subscriber", "sync", "Sentinel", "Sentinel watch", "cluster"
};

static void conn_closed(RlockConn *conn);

/*---- the connections ----*/

/*
 * The worker starts: "begin" is what makes a new connection READY.
 */
void
rlock_conn_init(RlockHandshakeFn begin)
{
	handshake_begin = begin;
}

/*
 * Forget the history of a connection: connect at once, log afresh.
 */
void
rlock_conn_start_over(RlockConn *conn)
{
	conn->retry_at = 0;
	conn->backoff_ms = RLOCK_BACKOFF_MIN_MS;
	conn->outage_logged = false;
	conn->ready_logged = false;
	conn->flap_logged = false;
}

/*
 * A connection to "srv" for "use", made (DOWN) when the loop finds it
 * wanted.  "group" is the data connections of its server, by use (NULL
 * for the others); "hooks" what it tells its maker.
 */
RlockConn *
rlock_conn_create(RlockServer *srv, RlockConnUse use, RlockConn **group,
				  const RlockConnHooks *hooks)
{
	RlockConn  *conn = MemoryContextAllocZero(rlock_redis_context,
											  sizeof(RlockConn));

	Assert(use >= 0 && use < RLOCK_NUSES);
	Assert(group != NULL || use >= RLOCK_NDATA);
	Assert(hooks->ready != NULL && hooks->lost != NULL &&
		   hooks->wanted != NULL);
	conn->role = conn_roles[use];
	conn->use = use;
	conn->subscriber = (use == RLOCK_USE_SUBSCRIBER || use == RLOCK_USE_WATCH);
	Assert(!conn->subscriber || hooks->message != NULL);
	conn->server = srv;
	conn->group = group;
	conn->hooks = hooks;
	conn->replicas = -1;
	conn->cxt = AllocSetContextCreate(rlock_redis_context,
									  "rlock connection",
									  ALLOCSET_DEFAULT_SIZES);
	conn->state = RLOCK_CONN_DOWN;
	conn->sock = PGINVALID_SOCKET;
	conn->since = GetCurrentTimestamp();
	conn->pos = -1;
	rlock_conn_start_over(conn);
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
	sockets_version++;
	return conn;
}

/*
 * Every connection made, in the order made: how many there are, and the
 * i-th.  More may be made while a caller goes through them.
 */
int
rlock_conn_count(void)
{
	return nall;
}

RlockConn *
rlock_conn_at(int i)
{
	Assert(i >= 0 && i < nall);
	return all[i];
}

/*
 * Changes whenever a connection is made or a socket is opened or closed:
 * the loop's wait set is built again then.
 */
uint64
rlock_conn_sockets_version(void)
{
	return sockets_version;
}

/*---- what the worker sees of one ----*/

/*
 * Why the connection is not ready, for messages.
 */
const char *
rlock_conn_error(RlockConn *conn)
{
	return conn->error[0] ? conn->error : "not connected";
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
 * A place for the worker's own state of a connection.
 */
void	  **
rlock_conn_worker_data(RlockConn *conn)
{
	return &conn->worker_data;
}

/*---- losing a connection ----*/

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
		sockets_version++;
	}
	rlock_reader_free(conn->reader);
	conn->reader = NULL;
	conn->partial_since = 0;
	/* the output buffer, the reader's replies, the TLS state */
	MemoryContextReset(conn->cxt);
	conn->out.data = NULL;
	conn->out.len = 0;
	conn->out_pos = 0;
	conn->pos = -1;				/* no place in the wait set now */
	conn->read_more = false;
}

/*
 * Answer what was on the wire with NULL: the commands are lost.
 */
static void
conn_answer_lost(RlockConn *conn)
{
	while (!dlist_is_empty(&conn->inflight))
	{
		RlockCmd   *cmd = dlist_container(RlockCmd, node,
										  dlist_pop_head_node(&conn->inflight));

		/* a write left on the wire may still run, until a fence */
		if (cmd->writes_locks && conn->use == RLOCK_USE_SYNC)
			conn->fence_owed = true;
		rlock_conn_answer(conn, cmd, NULL);
	}
}

/*
 * When to try again, and what the log says of the loss.
 */
static void
conn_after_loss(RlockConn *conn, bool was_ready, bool quiet, TimestampTz now)
{
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
		rlock_conn_start_over(conn);
		conn->since = now;
	}
	else if (quiet)
		conn->outage_logged = true;
	else
		conn_log_failure(conn, was_ready);
}

/*
 * The connection is gone, or never came.  Answer what was on the wire
 * with NULL, tell its maker, and schedule the next attempt.
 */
static void
conn_closed(RlockConn *conn)
{
	bool		was_ready = (conn->state == RLOCK_CONN_READY);
	bool		quiet = conn->quiet_drop;
	TimestampTz now = GetCurrentTimestamp();

	conn_release(conn);
	conn->state = RLOCK_CONN_DOWN;	/* from any state */
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
	conn_answer_lost(conn);
	conn_after_loss(conn, was_ready, quiet, now);
	conn->replicas = -1;
	conn->role_inflight = false;
	conn->hooks->lost(conn);
	conn->idle_drop = false;
}

/*
 * Close a connection on purpose.  The reason goes into rlock_status()'s
 * last error only if it is the first cause (a connection dropped because
 * the other one failed keeps that failure there).
 */
void
rlock_conn_close(RlockConn *conn, const char *reason, bool first_cause)
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
 * No file descriptor is left for a new socket: close the idle connection
 * that was used least recently, if there is one (a Redis Cluster
 * primary's, made for commands that are answered: its hooks say so).
 * True if one was closed, and so a descriptor freed.
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
			c->state != RLOCK_CONN_READY || c->hooks->reclaimable == NULL ||
			!c->hooks->reclaimable(c))
			continue;
		if (oldest == NULL || c->used_at < oldest->used_at)
			oldest = c;
	}
	if (oldest == NULL)
		return false;
	oldest->quiet_drop = true;
	oldest->idle_drop = true;
	rlock_conn_close(oldest, "its descriptor was needed for a connection in use",
					 false);
	return true;
}

/*---- making a connection ----*/

/*
 * The transport is open (and encrypted, with TLS): Redis's handshake.
 */
static void
conn_handshake(RlockConn *conn)
{
	Assert(conn->state == RLOCK_CONN_CONNECTING ||
		   conn->state == RLOCK_CONN_SECURING);
	conn->state = RLOCK_CONN_HANDSHAKE;
	handshake_begin(conn);
}

/*
 * The socket is connected: start the transport's own handshake, if it
 * has one, then Redis's.
 */
static void
conn_opened(RlockConn *conn)
{
	Assert(conn->state == RLOCK_CONN_CONNECTING);
	conn->reader = rlock_reader_create(conn->cxt);
	if (conn->reader == NULL)
	{
		rlock_conn_give_up(conn, "out of memory");
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
		conn_handshake(conn);
}

/*
 * Pick the transport for the server: TLS is for TCP; like libpq, a Unix
 * socket never uses it.
 */
static void
conn_pick_transport(RlockConn *conn)
{
	RlockServer *srv = conn->server;

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
}

/*
 * Open a new connection (or start resolving the host name first).
 */
void
rlock_conn_start(RlockConn *conn, TimestampTz now)
{
	RlockServer *srv = conn->server;

	Assert(conn->state == RLOCK_CONN_DOWN ||
		   conn->state == RLOCK_CONN_RESOLVING);
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

	conn_pick_transport(conn);
	conn->state = RLOCK_CONN_CONNECTING;
	conn->handshake = 0;
	conn->failed = false;
	conn->io_want = 0;
	sockets_version++;
	if (!rlock_socket_open(conn, conn_reclaim))
		conn_closed(conn);
}

/*
 * The handshake is over: the connection takes commands.
 */
void
rlock_conn_became_ready(RlockConn *conn)
{
	Assert(conn->state == RLOCK_CONN_HANDSHAKE && !conn->failed);
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
	conn->hooks->ready(conn);
}

/*
 * The socket of a connection is ready (or a transport buffers bytes):
 * move the connection on.
 */
void
rlock_conn_io(RlockConn *conn)
{
	RlockOpen	step;

	switch (conn->state)
	{
		case RLOCK_CONN_CONNECTING:
			if (!rlock_socket_connected(conn))
				rlock_conn_give_up(conn, NULL); /* the transport said why */
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
				conn_handshake(conn);
				rlock_wire_flush(conn);
			}
			break;
		case RLOCK_CONN_HANDSHAKE:
		case RLOCK_CONN_READY:
			rlock_wire_read(conn);
			break;
		case RLOCK_CONN_DOWN:
		case RLOCK_CONN_RESOLVING:
			break;
	}
}

/*---- deadlines ----*/

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
 * The start of each tick: drop the connection if it failed (or its
 * reader gave up its reply while another connection read).  True if it
 * was, and there is nothing more to do for it in this tick.
 */
bool
rlock_conn_tick_failed(RlockConn *conn)
{
	if (conn_reader_faulted(conn))
		rlock_wire_refused(conn);
	if (!conn->failed)
		return false;
	conn_closed(conn);
	return true;
}

/*
 * A connection being made: its host name resolved, or its connect or
 * handshake past rlock.connect_timeout.
 */
void
rlock_conn_tick_opening(RlockConn *conn, TimestampTz now)
{
	RlockServer *srv = conn->server;

	Assert(conn->state != RLOCK_CONN_DOWN && conn->state != RLOCK_CONN_READY);
	if (conn->state != RLOCK_CONN_RESOLVING)
	{
		if (now >= conn->deadline)
			rlock_conn_close(conn, conn_timeout_reason(conn), true);
		return;
	}
	rlock_resolve_check(srv);
	if (!srv->resolving)
	{
		if (srv->resolved[0] != '\0')
			rlock_conn_start(conn, now);
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
}

/*
 * When the oldest command of a connection is overdue.
 */
TimestampTz
rlock_conn_answer_due(RlockConn *conn)
{
	RlockCmd   *oldest;

	Assert(!dlist_is_empty(&conn->inflight));
	oldest = dlist_head_element(RlockCmd, node, &conn->inflight);
	return TimestampTzPlusMilliseconds(oldest->sent_at,
									   conn_command_timeout(conn));
}

/*
 * A ready connection with commands on the wire: drop it if the oldest
 * waited too long for its answer.
 */
void
rlock_conn_tick_answers(RlockConn *conn, TimestampTz now)
{
	char		msg[128];

	Assert(conn->state == RLOCK_CONN_READY);
	if (now < rlock_conn_answer_due(conn))
		return;
	snprintf(msg, sizeof(msg),
			 "no answer within rlock.command_timeout (%d ms)",
			 conn_command_timeout(conn));
	rlock_conn_close(conn, msg, true);

	/*
	 * A server that does not answer commands is not to be trusted with
	 * unlock messages either: subscribe anew once it answers again.
	 */
	if (conn->use == RLOCK_USE_COMMAND)
		rlock_conn_close(conn->group[RLOCK_USE_SUBSCRIBER],
						 "the command connection stopped getting answers",
						 false);
}

/*
 * A ready connection: drop it if part of a reply came longer than
 * rlock.command_timeout ago and the rest did not.  True if it was.
 */
bool
rlock_conn_tick_partial(RlockConn *conn, TimestampTz now)
{
	char		msg[128];

	if (conn->state != RLOCK_CONN_READY || conn->partial_since == 0 ||
		now < conn_partial_deadline(conn))
		return false;
	snprintf(msg, sizeof(msg),
			 "a reply left incomplete for longer than rlock.command_timeout (%d ms)",
			 rlock_command_timeout);
	rlock_conn_close(conn, msg, true);
	return true;
}

/*
 * When the reader of a connection needs the tick: at once if it gave up
 * its reply (to another connection's reading), when a reply left
 * incomplete is overdue.
 */
TimestampTz
rlock_conn_reader_due(RlockConn *conn)
{
	if (conn_reader_faulted(conn))
		return 0;
	if (conn->state == RLOCK_CONN_READY && conn->partial_since != 0)
		return conn_partial_deadline(conn);
	return DT_NOEND;
}

/*
 * Has the connection bytes to read with no socket event to say so: left
 * in the reader's way at the last wake-up, or inside TLS?
 */
bool
rlock_conn_buffered(RlockConn *conn)
{
	return conn->read_more ||
		(conn->tls != NULL && conn->transport->pending(conn));
}
