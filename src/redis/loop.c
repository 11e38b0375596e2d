/*-------------------------------------------------------------------------
 *
 * loop.c
 *		The Redis layer's side of the worker's loop: the tick that moves
 *		every connection on, the flush, and the one place the worker
 *		sleeps.
 *
 * Each pass of the worker ticks (rlock_redis_tick), handles requests,
 * flushes what they queued (rlock_redis_flush), publishes its status and
 * waits (rlock_redis_wait) until a socket is ready, the latch is set or
 * rlock_redis_next_tick() comes.  The tick drops failed connections,
 * makes those the topology wants and enforces their deadlines (conn.c),
 * closes those no longer wanted, keeps the command connection checked
 * with PING while the worker has waiters (rlock_redis_keepalive), and has
 * ROLE asked now and then for the replicas that rlock.sync_replicas =
 * auto waits for; then the Sentinels and the Redis Cluster's map and
 * router take their turn.
 *
 * All sockets sit in one WaitEventSet with the worker's latch and
 * postmaster death.  PostgreSQL 15 cannot remove an event from a set, so
 * the set is built again whenever a socket comes or goes
 * (rlock_conn_sockets_version).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/loop.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "redis/redis_int.h"

/* The sync connection asks ROLE for the replicas this often */
#define RLOCK_ROLE_INTERVAL_MS	1000
/* the command connection's ROLE, while it looks out for replicas */
#define RLOCK_ROLE_LOOKOUT_MS	10000

/* read the subscribers again at the end of this pass */
static bool subscribers_wanted = false;

static WaitEventSet *wait_set = NULL;
static uint64 wait_set_version = 0; /* rlock_conn_sockets_version() then */

/* What the set returned */
static WaitEvent *events_out = NULL;
static int	max_events = 0;

/* The wait event the worker shows while it waits (compat.h) */
static uint32 wait_event = 0;

/* Send a PING on the idle command connection (rlock_redis_keepalive) */
static bool keepalive = false;

/*---- what the loop asks of a ready connection ----*/

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
 * With keepalive on, the command connection is never idle for longer than
 * this: a PING goes out, and a server that stopped answering is found by
 * the command deadline even when nothing else is sent (waiters sleeping
 * on a long TTL, say).
 */
static TimestampTz
loop_keepalive_at(RlockConn *conn)
{
	int			interval = Max(Min(1000, rlock_command_timeout / 2), 10);

	return TimestampTzPlusMilliseconds(conn->last_sent_at, interval);
}

/*
 * Does a ready connection ask ROLE now and then, to know the replicas
 * "auto" waits for?  The sync connection does; so does the command
 * connection while the sync one is not made for want of replicas, to see
 * them come.
 */
static bool
loop_asks_role(RlockConn *conn)
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
loop_role_due(RlockConn *conn)
{
	return TimestampTzPlusMilliseconds(conn->role_at,
									   conn->use == RLOCK_USE_SYNC ?
									   RLOCK_ROLE_INTERVAL_MS :
									   RLOCK_ROLE_LOOKOUT_MS);
}

/*---- the tick ----*/

/*
 * A connection that is down: make it when wanted and due, else keep the
 * topology's reason for not making it, for messages.
 */
static void
loop_tick_down(RlockConn *conn, TimestampTz now)
{
	const char *why;

	if (!rlock_topology_wanted(conn, &why))
	{
		if (why != NULL && strcmp(conn->error, why) != 0)
			strlcpy(conn->error, why, sizeof(conn->error));
		return;
	}
	if (now >= conn->retry_at)
		rlock_conn_start(conn, now);
}

/*
 * A ready connection the topology no longer wants is closed: a Redis
 * Cluster primary's idle for a while or no longer serving slots, a sync
 * connection made for a fence only or no longer used.  True if it was.
 */
static bool
loop_close_unwanted(RlockConn *conn)
{
	const char *why;
	bool		idle;

	if (conn->node == NULL &&
		!(conn->use == RLOCK_USE_SYNC && dlist_is_empty(&conn->inflight)))
		return false;
	if (rlock_topology_wanted(conn, &why))
		return false;
	conn->quiet_drop = true;
	if (conn->node == NULL)
	{
		rlock_conn_close(conn, "the sync connection is not used now", true);
		return true;
	}
	/* idle, a node that no longer serves slots, or a topology that is no
	 * longer in use */
	idle = rlock_redis_cluster() && conn->node->primary;
	conn->idle_drop = idle;
	rlock_conn_close(conn, idle ?
					 "not used for a while (a Redis Cluster primary's connections are made when used)" :
					 "the node no longer serves slots of the Redis Cluster",
					 !idle);
	return true;
}

static void
loop_tick_ready(RlockConn *conn, TimestampTz now)
{
	if (loop_close_unwanted(conn))
		return;
	if (!dlist_is_empty(&conn->inflight))
		rlock_conn_tick_answers(conn, now);
	else if (keepalive && conn->use == RLOCK_USE_COMMAND &&
			 now >= loop_keepalive_at(conn))
		rlock_handshake_ping(conn);
	if (rlock_conn_tick_partial(conn, now))
		return;
	if (loop_asks_role(conn) && now >= loop_role_due(conn))
		rlock_handshake_role(conn);
}

/*
 * Advance one connection's life cycle: start attempts when due, enforce
 * the connect and command deadlines, drop connections found failed, and
 * check an idle command connection when asked to.
 */
static void
loop_tick(RlockConn *conn, TimestampTz now)
{
	if (rlock_conn_tick_failed(conn))
		return;
	switch (conn->state)
	{
		case RLOCK_CONN_DOWN:
			loop_tick_down(conn, now);
			break;
		case RLOCK_CONN_RESOLVING:
		case RLOCK_CONN_CONNECTING:
		case RLOCK_CONN_SECURING:
		case RLOCK_CONN_HANDSHAKE:
			rlock_conn_tick_opening(conn, now);
			break;
		case RLOCK_CONN_READY:
			loop_tick_ready(conn, now);
			break;
	}
}

void
rlock_redis_tick(TimestampTz now)
{
	int			i;

	for (i = 0; i < rlock_conn_count(); i++)
		loop_tick(rlock_conn_at(i), now);
	rlock_sentinel_tick(now);
	rlock_slotmap_tick(now);
	rlock_router_tick(now);
}

/*
 * When the tick next has something to do for a connection (0: at once).
 */
static TimestampTz
loop_next_tick(RlockConn *conn)
{
	const char *why;

	if (conn->failed || conn->read_more)
		return 0;
	switch (conn->state)
	{
		case RLOCK_CONN_DOWN:
			return rlock_topology_wanted(conn, &why) ? conn->retry_at : DT_NOEND;
		case RLOCK_CONN_RESOLVING:
		case RLOCK_CONN_CONNECTING:
		case RLOCK_CONN_SECURING:
		case RLOCK_CONN_HANDSHAKE:
			return conn->deadline;
		case RLOCK_CONN_READY:
			if (!dlist_is_empty(&conn->inflight))
				return rlock_conn_answer_due(conn);
			if (keepalive && conn->use == RLOCK_USE_COMMAND)
				return loop_keepalive_at(conn);
			if (loop_asks_role(conn))
				return loop_role_due(conn);
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

	for (i = 0; i < rlock_conn_count(); i++)
	{
		RlockConn  *conn = rlock_conn_at(i);

		next = Min(next, loop_next_tick(conn));
		next = Min(next, rlock_conn_reader_due(conn));
	}
	next = Min(next, rlock_slotmap_next());
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

	for (i = 0; i < rlock_conn_count(); i++)
	{
		RlockConn  *conn = rlock_conn_at(i);

		if (conn->state >= RLOCK_CONN_HANDSHAKE)
			rlock_wire_flush(conn);
	}
}

/*---- the wait ----*/

/*
 * The socket events a connection waits for now.
 */
static uint32
loop_socket_events(RlockConn *conn)
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
			Assert(conn->out_pos >= 0 && conn->out_pos <= conn->out.len);
			return WL_SOCKET_READABLE | conn->io_want |
				(conn->out_pos < conn->out.len ? WL_SOCKET_WRITEABLE : 0);
		default:
			return 0;
	}
}

static void
loop_build_wait_set(void)
{
	int			i;

	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	wait_set = rlock_wait_event_set(rlock_redis_context,
									2 + rlock_conn_count());
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
					  NULL, NULL);
	for (i = 0; i < rlock_conn_count(); i++)
	{
		RlockConn  *conn = rlock_conn_at(i);

		conn->pos = -1;
		if (conn->sock == PGINVALID_SOCKET)
			continue;
		conn->registered = loop_socket_events(conn);
		if (conn->registered == 0)
			conn->registered = WL_SOCKET_READABLE;
		conn->pos = AddWaitEventToSet(wait_set, conn->registered,
									  conn->sock, NULL, conn);
	}
	wait_set_version = rlock_conn_sockets_version();
}

/*
 * Make the wait set ready for a wait: built again if sockets came or
 * went, each socket's events as its connection wants them now.
 */
static void
loop_prepare_wait_set(void)
{
	int			i;

	if (wait_set == NULL || wait_set_version != rlock_conn_sockets_version())
		loop_build_wait_set();
	if (max_events < 2 + rlock_conn_count())
	{
		if (events_out != NULL)
			pfree(events_out);
		max_events = 2 + rlock_conn_count();
		events_out = MemoryContextAlloc(rlock_redis_context,
										sizeof(WaitEvent) * max_events);
	}
	for (i = 0; i < rlock_conn_count(); i++)
	{
		RlockConn  *conn = rlock_conn_at(i);
		uint32		want = loop_socket_events(conn);

		conn->woke = false;
		if (conn->pos >= 0 && want != 0 && want != conn->registered)
		{
			ModifyWaitEvent(wait_set, conn->pos, want, NULL);
			conn->registered = want;
		}
	}
}

/*
 * Ask the loop to read the subscribers again after the command
 * connections in this pass (rlock_redis_wait).
 */
void
rlock_redis_want_subscribers(void)
{
	subscribers_wanted = true;
}

/*
 * Sleep until the latch is set, a socket is ready or timeout_ms passes
 * (-1: no timeout), then move the connections whose sockets are ready.
 */
void
rlock_redis_wait(long timeout_ms)
{
	int			nevents;
	int			i;
	int			pass;

	for (i = 0; i < rlock_conn_count(); i++)
	{
		if (rlock_conn_buffered(rlock_conn_at(i)))
			timeout_ms = 0;
	}
	loop_prepare_wait_set();
	nevents = WaitEventSetWait(wait_set, timeout_ms, events_out,
							   max_events,
							   rlock_wait_event(&wait_event, "RlockWorkerMain"));
	/*
	 * Subscribers first: what Redis publishes while it runs a command (a
	 * tracking mark, worker/track.c) it writes before that command's
	 * reply, and a session answered before the worker read it may reach
	 * its commit too early to be vouched for.
	 */
	for (pass = 0; pass < 2; pass++)
	{
		for (i = 0; i < nevents; i++)
		{
			RlockConn  *conn = (RlockConn *) events_out[i].user_data;

			if (events_out[i].events & WL_LATCH_SET)
			{
				if (pass == 0)
					ResetLatch(MyLatch);
				continue;
			}
			if (conn == NULL || conn->pos != events_out[i].pos ||
				conn->failed || conn->subscriber != (pass == 0))
				continue;
			conn->woke = true;
			rlock_conn_io(conn);
		}
	}

	/*
	 * A reply read above waits for a push its subscriber has probably got
	 * by now (Redis may write the reply first): read the subscribers once
	 * more before the sessions answered get far.
	 */
	if (subscribers_wanted)
	{
		subscribers_wanted = false;
		for (i = 0; i < rlock_conn_count(); i++)
		{
			RlockConn  *conn = rlock_conn_at(i);

			if (conn->subscriber && !conn->failed &&
				conn->state == RLOCK_CONN_READY)
			{
				conn->woke = true;
				rlock_conn_io(conn);
			}
		}
	}

	/*
	 * Bytes left from an earlier wake-up, in the reader's way or inside
	 * TLS, with no socket event to say so: one pass for each connection
	 * that had none now.
	 */
	for (i = 0; i < rlock_conn_count(); i++)
	{
		RlockConn  *conn = rlock_conn_at(i);

		if (!conn->woke && !conn->failed &&
			conn->state >= RLOCK_CONN_HANDSHAKE && rlock_conn_buffered(conn))
			rlock_conn_io(conn);
	}
}
