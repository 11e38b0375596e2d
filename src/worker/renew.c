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
 * The batches are shared with the check before a commit (VERIFY): a script
 * over up to RLOCK_BATCH keys and their owners, one 1 or 0 back per key.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/renew.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "utils/memutils.h"
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
	if (next_renewal == 0 || rlock_cmd_conn()->state != RLOCK_CONN_READY)
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
 * Send one batch of entries (index and generation pairs) to a script:
 * EVALSHA sha n key... arg_ms owner...  The command carries the pairs, the
 * slot and request it answers, if any, and the caller's tag.  The worker alone frees entries
 * whose count is above zero, so the keys stay put while they are copied.
 */
bool
rlock_batch_send(RlockCmdType type, RlockScript script, int64 arg_ms,
				 const int *pairs, int n, int slot, uint64 seq, int32 tag)
{
	RlockCmd   *cmd = rlock_cmd_new(type);
	const char **argv;
	size_t	   *lens;
	char	   *owners;
	char		arg[24];
	char		nkeys[16];
	bool		sent;
	int			i;

	argv = palloc(sizeof(char *) * (2 * n + 4));
	lens = palloc(sizeof(size_t) * (2 * n + 4));
	owners = palloc(RLOCK_OWNER_MAXLEN * n);

	argv[0] = "EVALSHA";
	lens[0] = 7;
	argv[1] = rlock_script_sha(script);
	lens[1] = 40;
	argv[2] = nkeys;
	lens[2] = snprintf(nkeys, sizeof(nkeys), "%d", n);
	argv[3 + n] = arg;
	lens[3 + n] = snprintf(arg, sizeof(arg), INT64_FORMAT, arg_ms);
	for (i = 0; i < n; i++)
	{
		RlockHold  *h = rlock_hold(pairs[2 * i]);
		char	   *owner = owners + i * RLOCK_OWNER_MAXLEN;

		argv[3 + i] = h->key;
		lens[3 + i] = h->keylen;
		argv[4 + n + i] = owner;
		lens[4 + n + i] = rlock_owner_name(owner, h->owner_id);
	}

	cmd->slot = slot;
	cmd->seq = seq;
	cmd->target = tag;
	cmd->lease_ms = arg_ms;
	cmd->nholds = n;
	cmd->holds = MemoryContextAlloc(TopMemoryContext, sizeof(int) * 2 * n);
	memcpy(cmd->holds, pairs, sizeof(int) * 2 * n);
	sent = rlock_conn_send(rlock_cmd_conn(), cmd, 2 * n + 4, argv, lens);

	pfree(argv);
	pfree(lens);
	pfree(owners);
	return sent;
}

/*
 * Mark an entry lost.  The caller holds its mutex; true tells it to count
 * the loss (RLOCK_STAT_LOST) once it has let go of the mutex.
 */
bool
rlock_hold_mark_lost(RlockHold *h)
{
	bool		first = !h->lost;

	h->lost = true;
	return first;
}

/*
 * Apply the reply to a batch to its entries, if they are still the same
 * entries: those for which the script answered 0 (the owner's field was
 * gone) are marked lost, the others have their lease end moved to the
 * lease the batch set (or, with extend_only, to at least the margin it
 * ensured).  Returns how many were lost, or -1 if the reply is not one
 * number per key; *extended (if not NULL) is set to the number of entries
 * whose lease the reply moved.
 */
int
rlock_batch_apply(RlockCmd *cmd, void *r, bool extend_only, int *extended)
{
	redisReply *reply = (redisReply *) r;
	TimestampTz expires = TimestampTzPlusMilliseconds(cmd->sent_at,
													  cmd->lease_ms);
	int			lost = 0;
	int			newly_lost = 0;
	int			moved = 0;
	int			i;

	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
		reply->elements != (size_t) cmd->nholds)
		return -1;

	for (i = 0; i < cmd->nholds; i++)
	{
		RlockHold  *h = rlock_hold(cmd->holds[2 * i]);
		bool		held;

		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			continue;
		held = (reply->element[i]->integer != 0);
		SpinLockAcquire(&h->mutex);
		if (h->in_use && h->generation == (uint32) cmd->holds[2 * i + 1])
		{
			if (!held)
			{
				if (rlock_hold_mark_lost(h))
					newly_lost++;
				lost++;
			}
			else
			{
				if (!extend_only || h->expires_at < expires)
					rlock_hold_confirm(h, expires);
				moved++;
			}
		}
		SpinLockRelease(&h->mutex);
	}
	if (newly_lost > 0)
		rlock_count(RLOCK_STAT_LOST, newly_lost);
	if (extended)
		*extended = moved;
	return lost;
}

static void
renew_send(int *batch, int n)
{
	if (rlock_batch_send(RLOCK_CMD_RENEW, RLOCK_SCRIPT_RENEW,
						 rlock_watchdog_timeout, batch, n, -1, 0, 0))
		rlock_count(RLOCK_STAT_RENEWAL_CALLS, 1);
}

/*
 * Renew every watchdog hold, if the time has come.
 */
void
rlock_renew_tick(TimestampTz now)
{
	int			batch[2 * RLOCK_BATCH];
	int			n = 0;
	int			i;

	if (next_renewal == 0)
		next_renewal = TimestampTzPlusMilliseconds(now, renew_period_ms());
	if (now < next_renewal || rlock_cmd_conn()->state != RLOCK_CONN_READY)
		return;
	next_renewal = TimestampTzPlusMilliseconds(now, renew_period_ms());

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold  *h = rlock_hold(i);
		bool		renew;

		SpinLockAcquire(&h->mutex);
		renew = h->in_use && h->renew && !h->lost &&
			h->count - h->to_release > 0;
		batch[2 * n] = i;
		batch[2 * n + 1] = (int) h->generation;
		SpinLockRelease(&h->mutex);

		if (!renew)
			continue;
		if (++n == RLOCK_BATCH)
		{
			renew_send(batch, n);
			n = 0;
		}
	}
	if (n > 0)
		renew_send(batch, n);
}

/*
 * One 1 or 0 per key of the batch.  A 0 means Redis no longer has the
 * hold: the lock was lost.
 */
void
rlock_renew_reply(RlockCmd *cmd, void *r)
{
	redisReply *reply = (redisReply *) r;
	int			renewed;

	if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
	{
		/* no lock may expire for a script Redis forgot: reload, renew now */
		if (rlock_script_missing(reply->str))
		{
			rlock_scripts_load(rlock_cmd_conn());
			rlock_renew_soon();
		}
		else
			ereport(WARNING,
					(errmsg("Redis refused to renew the leases of %d locks",
							cmd->nholds),
					 errdetail_internal("%s", reply->str)));
		return;
	}
	/* anything else unexpected: the next period tries again */
	if (rlock_batch_apply(cmd, reply, false, &renewed) >= 0)
		rlock_count(RLOCK_STAT_RENEWALS, renewed);
}
