/*-------------------------------------------------------------------------
 *
 * entries.c
 *		The worker's side of the shared hold entries: where an entry's
 *		commands go, what the worker asks of an entry's state, and the
 *		batches of entries that renewals (renew.c) and the check before
 *		commit (VERIFY, send.c) send.
 *
 * The entries' fields change only through the transitions of
 * shared/holdtable.c; this file reads copies of them (rlock_hold_read).
 * An entry's key, kind and owner do not change while it is in use, and
 * the worker keeps an entry in use while it works on it (a request's
 * worker_refs, an acquire or release on the wire, a count above zero), so
 * those are read in place.
 *
 * A batch is one script call over up to RLOCK_BATCH entries of one kind
 * on one connection, with one 1 or 0 back per entry; it carries the
 * entries' index and generation pairs, so that its reply touches only the
 * entries it was sent for.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/entries.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/worker_int.h"

/*
 * The connection an entry's commands go on: its key's.
 */
RlockConn *
worker_hold_conn(int index)
{
	RlockHold  *h = rlock_hold(index);

	return rlock_redis_route(h->key, h->keylen);
}

/*
 * Is an acquire for the entry on the wire?
 */
bool
worker_hold_acquiring(int index)
{
	RlockHold	h;

	rlock_hold_read(index, &h);
	return h.acquiring;
}

/*
 * Has everything queued on an entry been sent and answered?
 */
bool
worker_hold_settled(int index)
{
	RlockHold	h;

	rlock_hold_read(index, &h);
	return !h.in_use ||
		(h.to_release == 0 && h.unacked == 0 && !h.resync && !h.queued &&
		 !h.acquiring);
}

/*
 * Is the entry in use by "owner_id"?  With "holding", only if it holds
 * something in Redis after the releases queued on it.  *generation is the
 * entry's generation.
 */
bool
worker_hold_owned(int index, uint64 owner_id, bool holding,
				  uint32 *generation)
{
	RlockHold	h;

	rlock_hold_read(index, &h);
	*generation = h.generation;
	return h.in_use && h.owner_id == owner_id &&
		(!holding || h.count - h.to_release > 0);
}

/*
 * A forced release from this instance removed the lock of a kind: the
 * local holders of the key in that kind lost it, whatever
 * rlock.verify_at_commit says, and so did those of the kinds whose lock
 * is the same hash (RLOCK_KIND_IN_FAMILY); a hold of the key in another kind is
 * another lock, which the forced release left alone.  An entry with
 * no confirmed hold is a waiter let in after the removal, or about to be:
 * it is left alone.  The key of an entry is compared only while it is the
 * entry read, whose key stays as long as its generation.
 */
void
worker_holds_lose_key(RlockKind kind, const char *key, int keylen)
{
	int			newly_lost = 0;
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold	h;
		bool		newly;

		rlock_hold_read(i, &h);
		if (!h.in_use || h.count <= 0 ||
			(h.kind != kind && !(RLOCK_KIND_IN_FAMILY(h.kind) &&
								 RLOCK_KIND_IN_FAMILY(kind))) ||
			h.keylen != keylen ||
			memcmp(rlock_hold(i)->key, key, keylen) != 0)
			continue;
		if (rlock_hold_lose(i, h.generation, &newly) && newly)
			newly_lost++;
	}
	if (newly_lost > 0)
		rlock_count(RLOCK_STAT_LOST, newly_lost);
}

/*---- batches ----*/

/*
 * Send one batch of entries (index and generation pairs) to the renew or
 * verify command of their kind.  The command carries the pairs, the slot
 * and request it answers, if any, and the caller's tag.  The worker alone
 * frees entries whose count is above zero, so the keys stay put while
 * they are copied.
 */
bool
worker_batch_send(RlockConn *conn, WorkerCmdType type, int64 arg_ms,
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
		holds[i].mode = h->mode;
		holds[i].waited = false;
		holds[i].queue_ms = 0;
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
worker_batcher_init(WorkerBatcher *b, WorkerCmdType type, int64 arg_ms,
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
batcher_flush_bucket(WorkerBatcher *b, BatchBucket *k)
{
	if (k->n == 0)
		return;
	if (worker_batch_send(k->conn, b->type, b->arg_ms, k->pairs, k->n,
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
worker_batcher_add(WorkerBatcher *b, int index, uint32 generation)
{
	RlockConn  *conn = worker_hold_conn(index);
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
	k->pairs[2 * k->n + 1] = (int) generation;
	if (++k->n == RLOCK_BATCH)
		batcher_flush_bucket(b, k);
}

/*
 * Send what is left.  Returns the number of batches sent in all; b->failed
 * says whether a connection could not take one.
 */
int
worker_batcher_finish(WorkerBatcher *b)
{
	ListCell   *lc;

	foreach(lc, b->buckets)
		batcher_flush_bucket(b, (BatchBucket *) lfirst(lc));
	list_free_deep(b->buckets);
	b->buckets = NIL;
	return b->sent;
}

/*
 * Is the reply to a batch one result per entry that the kind knows?  A
 * declared key is redirected before the script runs: a batch of one is
 * never told its entry is elsewhere.  If not, the connection fails.
 */
static bool
worker_batch_valid(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	const RlockKindMethod *kind = rlock_kinds[wc->kind];
	int			i;

	for (i = 0; i < wc->nholds; i++)
	{
		RlockBatchResult result = kind->batch_result(reply, i);

		if (result == RLOCK_BATCH_INVALID ||
			(result == RLOCK_BATCH_ELSEWHERE && wc->nholds == 1))
		{
			worker_unknown_status(conn, wc, wc->kind);
			return false;
		}
	}
	return true;
}

/*
 * Apply the reply to a batch to its entries, if they are still the same
 * entries: those for which the script answered 0 (the owner's field was
 * gone) are marked lost, the others have their lease end moved to the
 * lease the batch set (or, with extend_only, to at least the margin it
 * ensured).  Returns how many were lost, or -1 if the reply is lost, an
 * error, or not one 0 or 1 per key (which fails the connection);
 * *extended (if not NULL) is set to the number of entries whose lease the
 * reply moved.  Entries whose slot moved (a Redis Cluster) are neither:
 * their pairs are moved to the front of wc->holds, and *elsewhere (if not
 * NULL) says how many, for the caller to send each again on its own,
 * where a redirection can follow it.
 */
int
worker_batch_apply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply,
				   bool extend_only, int *extended, int *elsewhere)
{
	TimestampTz expires = TimestampTzPlusMilliseconds(wc->cmd.sent_at,
													  wc->lease_ms);
	int			nelsewhere = 0;
	int			lost = 0;
	int			newly_lost = 0;
	int			moved = 0;
	int			i;

	if (extended)
		*extended = 0;
	if (elsewhere)
		*elsewhere = 0;
	if (reply == NULL || reply->type == RLOCK_REPLY_ERROR ||
		!worker_batch_valid(conn, wc, reply))
		return -1;

	for (i = 0; i < wc->nholds; i++)
	{
		int			index = wc->holds[2 * i];
		uint32		generation = (uint32) wc->holds[2 * i + 1];
		bool		newly;

		switch (rlock_kinds[wc->kind]->batch_result(reply, i))
		{
			case RLOCK_BATCH_ELSEWHERE:
				wc->holds[2 * nelsewhere] = index;
				wc->holds[2 * nelsewhere + 1] = (int) generation;
				nelsewhere++;
				break;
			case RLOCK_BATCH_NOT_HELD:
				if (rlock_hold_lose(index, generation, &newly))
					lost++;
				if (newly)
					newly_lost++;
				break;
			default:
				if (rlock_hold_extend(index, generation, expires,
									  extend_only))
					moved++;
				break;
		}
	}
	if (newly_lost > 0)
		rlock_count(RLOCK_STAT_LOST, newly_lost);
	if (extended)
		*extended = moved;
	if (elsewhere)
		*elsewhere = nelsewhere;
	return lost;
}
