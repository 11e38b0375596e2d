/*-------------------------------------------------------------------------
 *
 * renew.c
 *		The watchdog: renews the leases of holds taken without an explicit
 *		lease, every third of rlock.watchdog_timeout, in batches.
 *
 * Renewal is driven from the shared hold table, not from the backends, so
 * a backend busy in a long query keeps its locks.  An entry is renewed
 * only while the count the worker last asked Redis to hold, minus the
 * releases queued on it, is above zero; releases and renewals travel on
 * the same connection in the order they were decided, so a renewal can
 * never outlive the release that follows it.  The script itself renews a
 * key only while the owner's field is in it: it never brings back a lock.
 * A renewal that finds the field gone marks the entry lost and stops.
 *
 * The batches are shared with the check before a commit (VERIFY), and
 * live with the rest of the worker's side of the entries (entries.c).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/renew.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "worker/worker_int.h"

static TimestampTz next_renewal = 0;

static int
renew_period_ms(void)
{
	return Max(rlock_watchdog_timeout / 3, 1);
}

/*
 * When the next renewal is due; never while there is no connection (the
 * renewals missed then are made as soon as it is back).
 */
TimestampTz
rlock_renew_next(void)
{
	if (next_renewal == 0 || !rlock_conn_ready(rlock_redis_command_conn()))
		return DT_NOEND;
	return next_renewal;
}

/*
 * Renew at the next pass: the connection is back, or Redis lost the script.
 */
void
rlock_renew_soon(void)
{
	next_renewal = GetCurrentTimestamp();
}

/*
 * Does the watchdog renew this entry: the one of "generation", holding
 * something after the releases queued on it, with a hold that uses the
 * watchdog and no loss seen?
 */
static bool
renew_due(const RlockHold *h, uint32 generation)
{
	return rlock_hold_is_current(h, generation) && h->renew && !h->lost &&
		h->count - h->to_release > 0;
}

/*
 * Renew every watchdog hold, if the time has come.  Entries whose
 * connection is not ready are left for the renewal made when it is back.
 */
void
rlock_renew_tick(TimestampTz now)
{
	WorkerBatcher b;
	int			kind;
	int			i;

	if (next_renewal == 0)
		next_renewal = TimestampTzPlusMilliseconds(now, renew_period_ms());
	if (now < next_renewal || !rlock_conn_ready(rlock_redis_command_conn()))
		return;
	next_renewal = TimestampTzPlusMilliseconds(now, renew_period_ms());

	/* a batch is one command of one kind, on one connection */
	for (kind = 0; kind < RLOCK_NKINDS; kind++)
	{
		worker_batcher_init(&b, WORKER_CMD_RENEW, rlock_watchdog_timeout,
							-1, 0, 0);
		for (i = 0; i < rlock_shared->nholds; i++)
		{
			RlockHold	h;

			rlock_hold_read(i, &h);
			if (h.kind == kind && renew_due(&h, h.generation) &&
				rlock_conn_ready(worker_hold_conn(i)))
				worker_batcher_add(&b, i, h.generation);
		}
		rlock_count(RLOCK_STAT_RENEWAL_CALLS, worker_batcher_finish(&b));
	}
}

/*
 * One 1 or 0 per key of the batch.  A 0 means Redis no longer has the
 * hold: the lock was lost.
 */
void
rlock_renew_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	int			renewed;
	int			elsewhere;
	int			i;

	if (reply != NULL && reply->type == RLOCK_REPLY_ERROR)
	{
		/* no lock may expire for a script Redis forgot: reload, renew now */
		if (rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT)
		{
			if (rlock_scripts_reload(conn, &wc->cmd))
				rlock_renew_soon();
		}
		else
			ereport(WARNING,
					(errmsg_plural("Redis refused to renew the lease of %d lock",
								   "Redis refused to renew the leases of %d locks",
								   wc->nholds, wc->nholds),
					 errdetail_internal("%s", reply->str)));
		return;
	}
	/* anything else unexpected: the next period tries again */
	if (worker_batch_apply(conn, wc, reply, false, &renewed, &elsewhere) >= 0)
		rlock_count(RLOCK_STAT_RENEWALS, renewed);
	/* entries whose slot moved: one by one, keyed, so that Redis's
	 * redirection takes each where it went; those still renewed */
	for (i = 0; i < elsewhere; i++)
	{
		RlockHold	h;

		rlock_hold_read(wc->holds[2 * i], &h);
		if (renew_due(&h, (uint32) wc->holds[2 * i + 1]))
			(void) worker_batch_send(worker_hold_conn(wc->holds[2 * i]),
									 WORKER_CMD_RENEW, wc->lease_ms,
									 &wc->holds[2 * i], 1, -1, 0, 0);
	}
}
