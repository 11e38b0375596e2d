/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The rlock background worker: the only process that talks to Redis.
 *
 * One loop does everything.  Each pass:
 *
 *	1. advances the connections (attempts, deadlines, failures);
 *	2. drains the ring in FIFO order: hold entries with releases to send,
 *	   and slots with new (or given-up) requests;
 *	3. fires due timers: releases Redis refused to send again, waits that
 *	   ran out, TTL-bounded retries, requests that found no connection in
 *	   time;
 *	   after each of these events (and after each reply), it passes on the
 *	   wake-ups that requests ending in it gave up (waiters.c), so that a
 *	   request's completion never retries another request from within;
 *	4. sends the pending requests and, when due, the watchdog renewals;
 *	5. flushes: everything queued in this pass goes out in one write per
 *	   connection;
 *	6. sleeps on the one WaitEventSet until the latch, a socket or the next
 *	   deadline, and lets the Redis layer hand each reply to the command it
 *	   answers (worker_cmd_done).
 *
 * Memory: the worker's long-lived state lives in "rlock worker", its
 * commands in a slab ("rlock commands"), and whatever a pass allocates
 * for a moment in "rlock worker pass", which is reset at the start of
 * every pass.  The Redis layer has contexts of its own.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/worker_int.h"

MemoryContext rlock_worker_context = NULL;
static MemoryContext cmd_context = NULL;
static MemoryContext pass_context = NULL;
static RlockArgs *args_builder = NULL;

/* How often the lists of entries by owner shed entries let go */
#define RLOCK_SWEEP_MS			10000
static TimestampTz sweep_at = 0;

/*
 * Stopping.  SIGTERM (a shutdown, or pg_terminate_backend) does not end
 * the worker at once: sessions ending in the same shutdown hand their
 * releases to it, and an explicit lease would keep a lock that nobody
 * released for its whole length.  So the worker answers every request
 * with SHUTDOWN, then keeps sending releases until none is left to send
 * or to hear about and no session pins an entry any more, for at most
 * RLOCK_STOP_PINS_MS of waiting for sessions and rlock.command_timeout in
 * all.
 */
#define RLOCK_STOP_PINS_MS		500
static volatile sig_atomic_t stop_requested = false;
bool		rlock_worker_stopping = false;
static TimestampTz stop_pins_by = 0;
static TimestampTz stop_by = 0;

/*---- commands ----*/

static void worker_cmd_done(RlockConn *conn, RlockCmd *cmd,
							const RlockReply *reply);

/*
 * A new command record; the caller fills in what its type needs.
 */
WorkerCmd *
worker_cmd_new(WorkerCmdType type)
{
	WorkerCmd  *wc = MemoryContextAllocZero(cmd_context, sizeof(WorkerCmd));

	wc->type = type;
	wc->cmd.done = worker_cmd_done;
	return wc;
}

void
worker_cmd_free(WorkerCmd *wc)
{
	if (wc->holds != NULL)
		pfree(wc->holds);
	pfree(wc);
}

/*
 * Send a command built in "args".  False (and the record freed) if the
 * connection cannot take it.
 */
bool
worker_cmd_send(RlockConn *conn, WorkerCmd *wc, RlockArgs *args)
{
	wc->sent_on = conn;
	rlock_track_sending(wc);
	if (rlock_conn_send(conn, &wc->cmd, args))
		return true;
	worker_cmd_free(wc);
	return false;
}

/*
 * The builder for the next command, emptied.
 */
RlockArgs *
worker_args(void)
{
	rlock_args_reset(args_builder);
	return args_builder;
}

/*
 * A script of a lock kind answered with a status none of its scripts
 * returns: the connection cannot be trusted, and is made again.
 */
void
worker_unknown_status(RlockConn *conn, const WorkerCmd *wc, RlockKind kind)
{
	static const char *const what[] = {
		[WORKER_CMD_ACQUIRE] = "an acquire",
		[WORKER_CMD_RELEASE] = "a release",
		[WORKER_CMD_QUERY] = "a holder query",
		[WORKER_CMD_RENEW] = "a renewal batch",
		[WORKER_CMD_VERIFY] = "a check batch",
		[WORKER_CMD_TRANSFER] = "a transfer",
		[WORKER_CMD_ACQUIRE_SET] = "a set's acquire",
	};
	char		detail[96];

	Assert(wc->type < lengthof(what) && what[wc->type] != NULL);
	snprintf(detail, sizeof(detail),
			 "%s (lock kind %s) answered with an unknown status",
			 what[wc->type], rlock_kind_names[kind]);
	rlock_conn_fail(conn, detail);
}

/*
 * Lease to send for a hold described by lease_ms (0 = the watchdog).
 */
int64
worker_lease(int64 lease_ms)
{
	return lease_ms > 0 ? lease_ms : rlock_watchdog_timeout;
}

/*
 * A reply (NULL: the connection went away first) to one of the worker's
 * commands.  Raises nothing, closes no connection.
 */
static void
worker_cmd_done(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	WorkerCmd  *wc = (WorkerCmd *) cmd;

	if (reply != NULL && reply->type == RLOCK_REPLY_ERROR)
	{
		rlock_count(RLOCK_STAT_REDIS_ERRORS, 1);
		rlock_redis_status_error(reply->str);
	}
	switch (wc->type)
	{
		case WORKER_CMD_ACQUIRE:
		case WORKER_CMD_RELEASE:
		case WORKER_CMD_QUERY:
		case WORKER_CMD_RENEW:
		case WORKER_CMD_VERIFY:
		case WORKER_CMD_SYNC:
		case WORKER_CMD_TRANSFER:
		case WORKER_CMD_ACQUIRE_SET:
			if (reply != NULL)
				rlock_latency(RLOCK_LATENCY_ROUND_TRIP,
							  GetCurrentTimestamp() - cmd->sent_at);
			break;
		case WORKER_CMD_SUBSCRIBE:
		case WORKER_CMD_UNSUBSCRIBE:
		case WORKER_CMD_REGISTER:
		case WORKER_CMD_PUBLISH:
		case WORKER_CMD_TRACK:
		case WORKER_CMD_WFG:
			break;
	}
	switch (wc->type)
	{
		case WORKER_CMD_ACQUIRE:
			worker_acquire_reply(conn, wc, reply);
			break;
		case WORKER_CMD_RELEASE:
			worker_release_reply(conn, wc, reply);
			break;
		case WORKER_CMD_QUERY:
			worker_query_reply(conn, wc, reply);
			break;
		case WORKER_CMD_RENEW:
			rlock_renew_reply(conn, wc, reply);
			break;
		case WORKER_CMD_VERIFY:
			worker_verify_reply(conn, wc, reply);
			break;
		case WORKER_CMD_SUBSCRIBE:
		case WORKER_CMD_UNSUBSCRIBE:
			rlock_waiters_reply(conn, wc, reply);
			break;
		case WORKER_CMD_REGISTER:
			rlock_registry_reply(conn, wc, reply);
			break;
		case WORKER_CMD_WFG:
			rlock_wfg_reply(conn, wc, reply);
			break;
		case WORKER_CMD_SYNC:
			worker_sync_reply(conn, wc, reply);
			break;
		case WORKER_CMD_PUBLISH:
			break;
		case WORKER_CMD_TRACK:
			rlock_track_reply(conn, wc, reply);
			break;
		case WORKER_CMD_TRANSFER:
			worker_transfer_reply(conn, wc, reply);
			break;
		case WORKER_CMD_ACQUIRE_SET:
			worker_acquire_set_reply(conn, wc, reply);
			break;
	}
	worker_cmd_free(wc);
	/* what a request that ended with this reply passed on */
	rlock_waiters_drain();
}

/*---- connection events ----*/

/*
 * A connection became READY.  On the command connection, the give-ups
 * that found it down go out, entries whose count Redis may not match go
 * back on the ring (they are sent before any pending request) and the
 * watchdog renews at once; on the subscriber, the
 * waiters' channels are subscribed again.
 */
static void
worker_conn_ready(RlockConn *conn)
{
	if (rlock_conn_is_subscriber(conn))
	{
		rlock_track_conn_ready(conn);
		rlock_waiters_conn_ready(conn);
		return;
	}
	if (rlock_conn_is_sync(conn))
	{
		worker_give_ups_flush();
		worker_sync_conn_ready(conn);
		return;
	}
	worker_give_ups_flush();
	worker_requeue_all_holds();
	rlock_renew_soon();
	rlock_registry_touch();
}

/*
 * A connection went away.  On the command connection, Redis may have lost
 * what it confirmed (a restart): commits ask again; pending and waiting
 * requests get rlock.connect_timeout to see it come back.
 */
static void
worker_conn_lost(RlockConn *conn)
{
	rlock_track_conn_lost(conn);
	if (rlock_conn_is_subscriber(conn))
	{
		rlock_waiters_conn_lost(conn);
		return;
	}
	/* the sync connection's acquisitions were answered one by one */
	if (rlock_conn_is_sync(conn))
	{
		worker_requests_sync_lost(conn);
		return;
	}
	pg_atomic_fetch_add_u32(&rlock_shared->cmd_epoch, 1);
	worker_requests_conn_lost(conn);
}

static void
worker_message(RlockConn *conn, const char *channel, int channellen,
			   const char *payload, int payloadlen)
{
	if (!rlock_track_message(conn, channel, channellen, payload, payloadlen))
		rlock_waiters_message(channel, channellen, payload, payloadlen);
}

static void
worker_unsubscribed(RlockConn *conn, const char *channel, int channellen)
{
	rlock_waiters_unsubscribed(conn, channel, channellen);
}

static const RlockConnEvents worker_events = {
	worker_conn_ready,
	worker_conn_lost,
	worker_message,
	worker_unsubscribed,
	rlock_waiters_on,
	rlock_track_invalidated
};

/*---- the ring ----*/

static void
worker_drain_ring(void)
{
	int			item;

	while (rlock_ring_pop(&item))
	{
		if (item >= 0)
			worker_sync_hold(item);
		else
			worker_take_slot(-1 - item);
		/* what a request given up passed on */
		rlock_waiters_drain();
	}
}

/*---- start and exit ----*/

static void
worker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	stop_requested = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * SIGTERM came: answer every request, and start the last round of
 * releases.
 */
static void
worker_begin_stop(TimestampTz now)
{
	rlock_worker_stopping = true;
	stop_pins_by = TimestampTzPlusMilliseconds(now, RLOCK_STOP_PINS_MS);
	stop_by = TimestampTzPlusMilliseconds(now,
										  Max(rlock_command_timeout,
											  RLOCK_STOP_PINS_MS));
	worker_requests_stop();
	rlock_waiters_drain();
}

/*
 * May the stopping worker exit: is every release sent and answered, and
 * no entry pinned by a session (one that may still hand back its holds)?
 */
static bool
worker_may_stop(TimestampTz now)
{
	bool		connected = rlock_conn_ready(rlock_redis_command_conn());
	int			i;

	if (now >= stop_by)
		return true;
	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold	h;

		rlock_hold_read(i, &h);
		if (h.in_use &&
			((h.pinned && now < stop_pins_by) ||
			 h.to_release > 0 || h.unacked > 0 || h.queued ||
			 h.acquiring || (h.resync && connected)))
			return false;
	}
	return true;
}

/*
 * Answer every request a worker had taken, so that no backend waits for a
 * worker that is gone.
 */
static void
worker_answer_taken_slots(void)
{
	int			i;

	for (i = 0; i < rlock_shared->nslots; i++)
	{
		RlockSlot  *s = rlock_slot(i);
		Latch	   *latch = NULL;

		SpinLockAcquire(&s->mutex);
		if (s->state == RLOCK_SLOT_TAKEN)
		{
			s->status = RLOCK_STATUS_SHUTDOWN;
			strlcpy(s->detail, "The rlock background worker exited.",
					sizeof(s->detail));
			s->state = RLOCK_SLOT_DONE;
			latch = s->latch;
		}
		SpinLockRelease(&s->mutex);
		if (latch != NULL)
			SetLatch(latch);
	}
}

/*
 * before_shmem_exit callback of the worker.
 */
static void
worker_exit(int code, Datum arg)
{
	SpinLockAcquire(&rlock_shared->mutex);
	rlock_shared->worker_latch = NULL;
	rlock_shared->worker_pid = 0;
	SpinLockRelease(&rlock_shared->mutex);
	/* nobody watches Redis until the next worker: commits ask */
	pg_atomic_fetch_add_u32(&rlock_shared->cmd_epoch, 1);
	worker_answer_taken_slots();
}

static void
worker_init(void)
{
	MemoryContext old;

	rlock_worker_context = AllocSetContextCreate(TopMemoryContext,
												 "rlock worker",
												 ALLOCSET_DEFAULT_SIZES);
	cmd_context = SlabContextCreate(rlock_worker_context, "rlock commands",
									SLAB_DEFAULT_BLOCK_SIZE,
									sizeof(WorkerCmd));
	pass_context = AllocSetContextCreate(rlock_worker_context,
										 "rlock worker pass",
										 ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(rlock_worker_context);
	args_builder = rlock_args_create(rlock_worker_context);
	worker_requests_init(rlock_shared->nslots);
	worker_sync_init(rlock_shared->nholds);
	worker_releases_init(rlock_shared->nholds);

	/* in case a previous worker died without its exit callback */
	worker_answer_taken_slots();
	pg_atomic_fetch_add_u32(&rlock_shared->cmd_epoch, 1);	/* its connection */
	rlock_owners_init();
	worker_recover_holds();
	rlock_waiters_init(rlock_shared->nslots);
	rlock_kinds_init();
	rlock_registry_init();
	rlock_wfg_init();
	rlock_redis_start(&worker_events);
	MemoryContextSwitchTo(old);
}

void
rlock_worker_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, worker_sigterm);
	BackgroundWorkerUnblockSignals();

	/* no database: this only makes the worker visible in pg_stat_activity */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_activity(STATE_RUNNING, NULL);

	worker_init();
	before_shmem_exit(worker_exit, (Datum) 0);

	SpinLockAcquire(&rlock_shared->mutex);
	rlock_shared->worker_latch = MyLatch;
	rlock_shared->worker_pid = MyProcPid;
	SpinLockRelease(&rlock_shared->mutex);

	MemoryContextSwitchTo(pass_context);
	for (;;)
	{
		TimestampTz now;
		TimestampTz next;
		long		timeout;

		MemoryContextReset(pass_context);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			rlock_redis_reload();
		}

		now = GetCurrentTimestamp();
		if (stop_requested && !rlock_worker_stopping)
			worker_begin_stop(now);
		if (rlock_worker_stopping && worker_may_stop(now))
			ereport(FATAL,
					(errcode(ERRCODE_ADMIN_SHUTDOWN),
					 errmsg("terminating background worker \"%s\" due to administrator command",
							MyBgworkerEntry->bgw_type)));
		rlock_redis_keepalive(worker_requests_waiting());
		rlock_redis_tick(now);
		worker_drain_ring();
		worker_releases_tick(now);
		worker_fire_timers(now);
		rlock_waiters_drain();
		worker_send_pending();
		worker_sync_flush();
		rlock_renew_tick(now);
		rlock_registry_tick(now);
		rlock_wfg_tick(now);
		if (now >= sweep_at)
		{
			rlock_owners_sweep();
			sweep_at = TimestampTzPlusMilliseconds(now, RLOCK_SWEEP_MS);
		}
		rlock_track_tick();
		rlock_redis_flush();
		rlock_redis_status_publish(rlock_waiters_channels());

		next = Min(Min(rlock_redis_next_tick(), worker_next_timer()),
				   Min(rlock_renew_next(), worker_releases_next()));
		next = Min(next, rlock_registry_next());
		next = Min(next, rlock_wfg_next());
		if (rlock_worker_stopping)
			next = Min(next, now < stop_pins_by ?
					   TimestampTzPlusMilliseconds(now, 20) : stop_by);
		if (next == DT_NOEND)
			timeout = -1;
		else
		{
			now = GetCurrentTimestamp();
			timeout = (next <= now) ? 0 : (long) ((next - now + 999) / 1000);
		}
		rlock_redis_wait(timeout);
	}
}
