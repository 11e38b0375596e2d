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
 *		src/worker/renew.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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
 * Send one batch of entries (index and generation pairs) to the renew or
 * verify command of their kind.  The command carries the pairs, the slot
 * and request it answers, if any, and the caller's tag.  The worker alone
 * frees entries whose count is above zero, so the keys stay put while
 * they are copied.
 */
bool
rlock_batch_send(RlockConn *conn, WorkerCmdType type, int64 arg_ms,
				 const int *pairs, int n, int slot, uint64 seq, int32 tag)
{
	WorkerCmd  *wc = worker_cmd_new(type);
	RlockArgs  *args = worker_args();
	RlockKindHold *holds = palloc(sizeof(RlockKindHold) * n);
	RlockKind	kind = rlock_hold(pairs[0])->kind;
	int			i;

	for (i = 0; i < n; i++)
	{
		RlockHold  *h = rlock_hold(pairs[2 * i]);

		Assert(h->kind == kind);
		holds[i].key = h->key;
		holds[i].keylen = h->keylen;
		holds[i].owner_id = h->owner_id;
	}
	rlock_kinds[kind]->batch(args, &wc->cmd,
							 type == WORKER_CMD_RENEW ? RLOCK_BATCH_RENEW :
							 RLOCK_BATCH_VERIFY,
							 arg_ms, holds, n);
	pfree(holds);

	wc->kind = kind;
	wc->slot = slot;
	wc->seq = seq;
	wc->target = tag;
	wc->lease_ms = arg_ms;
	wc->nholds = n;
	wc->holds = MemoryContextAlloc(rlock_worker_context, sizeof(int) * 2 * n);
	memcpy(wc->holds, pairs, sizeof(int) * 2 * n);
	return worker_cmd_send(conn, wc, args);
}

/*
 * The connection an entry's commands go on: its key's.
 */
RlockConn *
rlock_hold_conn(int index)
{
	RlockHold  *h = rlock_hold(index);

	return rlock_redis_route(h->key, h->keylen);
}

/*
 * Entries gathered into batches by the connection they go on (one in a
 * single server, one per primary in a Redis Cluster), sent as each fills.
 */
typedef struct BatchBucket
{
	RlockConn  *conn;
	int			n;
	int			pairs[2 * RLOCK_BATCH];
} BatchBucket;

void
rlock_batcher_init(RlockBatcher *b, WorkerCmdType type, int64 arg_ms,
				   int slot, uint64 seq, int32 tag)
{
	b->type = type;
	b->arg_ms = arg_ms;
	b->slot = slot;
	b->seq = seq;
	b->tag = tag;
	b->buckets = NIL;
	b->sent = 0;
	b->failed = false;
}

static void
batcher_flush_bucket(RlockBatcher *b, BatchBucket *k)
{
	if (k->n == 0)
		return;
	if (rlock_batch_send(k->conn, b->type, b->arg_ms, k->pairs, k->n,
						 b->slot, b->seq, b->tag))
		b->sent++;
	else
		b->failed = true;
	k->n = 0;
}

/*
 * Add an entry (index and generation) to its connection's batch.
 */
void
rlock_batcher_add(RlockBatcher *b, int index, int generation)
{
	RlockConn  *conn = rlock_hold_conn(index);
	BatchBucket *k = NULL;
	ListCell   *lc;

	foreach(lc, b->buckets)
	{
		if (((BatchBucket *) lfirst(lc))->conn == conn)
		{
			k = (BatchBucket *) lfirst(lc);
			break;
		}
	}
	if (k == NULL)
	{
		k = palloc(sizeof(BatchBucket));	/* the pass's memory */
		k->conn = conn;
		k->n = 0;
		b->buckets = lappend(b->buckets, k);
	}
	k->pairs[2 * k->n] = index;
	k->pairs[2 * k->n + 1] = generation;
	if (++k->n == RLOCK_BATCH)
		batcher_flush_bucket(b, k);
}

/*
 * Send what is left.  Returns the number of batches sent in all; b->failed
 * says whether a connection could not take one.
 */
int
rlock_batcher_finish(RlockBatcher *b)
{
	ListCell   *lc;

	foreach(lc, b->buckets)
		batcher_flush_bucket(b, (BatchBucket *) lfirst(lc));
	list_free_deep(b->buckets);
	b->buckets = NIL;
	return b->sent;
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
 * ensured).  Returns how many were lost, or -1 if the reply is lost, an
 * error, or not one 0 or 1 per key (which fails the connection);
 * *extended (if not NULL) is set to the number of entries whose lease the
 * reply moved.
 */
int
rlock_batch_apply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply,
				  bool extend_only, int *extended, int *elsewhere)
{
	int			nelsewhere = 0;

	const RlockKindMethod *kind;
	TimestampTz expires = TimestampTzPlusMilliseconds(wc->cmd.sent_at,
													  wc->lease_ms);
	int			lost = 0;
	int			newly_lost = 0;
	int			moved = 0;
	int			i;

	if (extended)
		*extended = 0;
	if (elsewhere)
		*elsewhere = 0;
	if (reply == NULL || reply->type == RLOCK_REPLY_ERROR)
		return -1;
	kind = rlock_kinds[wc->kind];
	for (i = 0; i < wc->nholds; i++)
	{
		RlockBatchResult result = kind->batch_result(reply, i);

		/* a declared key is redirected before the script runs: never 2 */
		if (result == RLOCK_BATCH_INVALID ||
			(result == RLOCK_BATCH_ELSEWHERE && wc->nholds == 1))
		{
			worker_unknown_status(conn, wc, wc->kind);
			return -1;
		}
	}

	for (i = 0; i < wc->nholds; i++)
	{
		RlockHold  *h = rlock_hold(wc->holds[2 * i]);
		RlockBatchResult result = kind->batch_result(reply, i);

		if (result == RLOCK_BATCH_ELSEWHERE)
		{
			/*
			 * Its slot moved: neither lost nor renewed.  Its pair is
			 * moved to the front of wc->holds for the caller, who sends
			 * it again on its own, where a redirection can follow it.
			 */
			wc->holds[2 * nelsewhere] = wc->holds[2 * i];
			wc->holds[2 * nelsewhere + 1] = wc->holds[2 * i + 1];
			nelsewhere++;
			continue;
		}
		SpinLockAcquire(&h->mutex);
		if (h->in_use && h->generation == (uint32) wc->holds[2 * i + 1])
		{
			if (result == RLOCK_BATCH_NOT_HELD)
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
	if (elsewhere)
		*elsewhere = nelsewhere;
	return lost;
}

/*
 * Renew every watchdog hold, if the time has come.  Entries whose
 * connection is not ready are left for the renewal made when it is back.
 */
void
rlock_renew_tick(TimestampTz now)
{
	RlockBatcher b;
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
		rlock_batcher_init(&b, WORKER_CMD_RENEW, rlock_watchdog_timeout,
						   -1, 0, 0);
		for (i = 0; i < rlock_shared->nholds; i++)
		{
			RlockHold  *h = rlock_hold(i);
			bool		renew;
			int			generation;

			SpinLockAcquire(&h->mutex);
			renew = h->in_use && h->kind == kind && h->renew && !h->lost &&
				h->count - h->to_release > 0;
			generation = (int) h->generation;
			SpinLockRelease(&h->mutex);

			if (renew && rlock_conn_ready(rlock_hold_conn(i)))
				rlock_batcher_add(&b, i, generation);
		}
		rlock_count(RLOCK_STAT_RENEWAL_CALLS, rlock_batcher_finish(&b));
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
	if (rlock_batch_apply(conn, wc, reply, false, &renewed, &elsewhere) >= 0)
		rlock_count(RLOCK_STAT_RENEWALS, renewed);
	/* entries whose slot moved: one by one, keyed, so that Redis's
	 * redirection takes each where it went; those still renewed */
	for (i = 0; i < elsewhere; i++)
	{
		RlockHold  *h = rlock_hold(wc->holds[2 * i]);
		bool		renew;

		SpinLockAcquire(&h->mutex);
		renew = h->in_use && h->generation == (uint32) wc->holds[2 * i + 1] &&
			h->renew && !h->lost && h->count - h->to_release > 0;
		SpinLockRelease(&h->mutex);
		if (renew)
			(void) rlock_batch_send(rlock_hold_conn(wc->holds[2 * i]),
									WORKER_CMD_RENEW, wc->lease_ms,
									&wc->holds[2 * i], 1, -1, 0, 0);
	}
}
