/*-------------------------------------------------------------------------
 *
 * releases.c
 *		Releases, and bringing Redis back to the counts the worker knows.
 *
 * The worker keeps, per hold entry, the hold count it has asked Redis to
 * hold (RlockHold.count).  Every acquire and release names that target
 * count (kinds/README.md), so after a lost reply the worker simply sends
 * the entry's count again ("resync"): an entry marked resync goes back on
 * the ring and its release command, with the count to leave, goes out
 * again.  Releases queued by backends come off the same ring in order,
 * behind the session's earlier requests.
 *
 * A release Redis refuses for a passing reason (BUSY, OOM, READONLY,
 * LOADING ...) is sent again after RLOCK_RESYNC_DELAY_MS; one refused for
 * a missing script is sent again right behind SCRIPT LOAD, unless the
 * scripts were loaded less than a second ago and went missing again, in
 * which case it waits like the others.  A worker that died with commands
 * on the wire leaves entries whose outcome is unknown; the next worker
 * restates them all (worker_recover_holds).
 *
 * Full releases this worker sent that no local waiter was handed, and
 * wake-ups that a waiter gave up without passing them on, are numbered,
 * and for each of a fixed number of key hashes the number of the latest
 * is kept: an acquire that was on the wire when this instance freed its
 * key must not sleep on its busy answer (it was not a waiter yet, so the
 * hand-off could not reach it, and the unlock message went out before it
 * subscribed).  When a hand-off reached a waiter, the lock is that
 * waiter's, and tries on the wire sleep.  A hash collision only costs an
 * early retry.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/releases.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/worker_int.h"

#define RLOCK_RELEASE_MARKS		1024

/* Wait before sending again a release Redis refused */
#define RLOCK_RESYNC_DELAY_MS	1000

/* Repeat a warning about refused releases at most this often */
#define RLOCK_WARN_INTERVAL_MS	10000

static RlockStatus *release_status; /* outcome of each entry's last release */
static bool *release_refused;	/* Redis refused the entry's last release */
static char release_refusal[RLOCK_DETAIL_LEN];	/* the latest refusal */
static uint64 releases_sent = 0;
static uint64 release_marks[RLOCK_RELEASE_MARKS];
static int	release_handing[RLOCK_RELEASE_MARKS];

/* Releases Redis refused for a passing reason are sent again at this time */
static TimestampTz resync_at = 0;

/* The last warning about a refused release, to repeat it only so often */
static TimestampTz release_warned_at = 0;

void
worker_releases_init(int nholds)
{
	int			i;

	release_status = MemoryContextAlloc(rlock_worker_context,
										sizeof(RlockStatus) * nholds);
	for (i = 0; i < nholds; i++)
		release_status[i] = RLOCK_STATUS_OK;
	release_refused = MemoryContextAllocZero(rlock_worker_context,
											 sizeof(bool) * nholds);
}

RlockStatus
worker_release_status(int index)
{
	return release_status[index];
}

/*
 * Did Redis refuse the last release of entry "index" (it is sent again
 * later)?  If so, *error is what Redis said.
 */
bool
worker_release_refused(int index, const char **error)
{
	*error = release_refusal;
	return release_refused[index];
}

static int
release_mark_index(const char *key, int keylen)
{
	return hash_bytes((const unsigned char *) key, keylen) %
		RLOCK_RELEASE_MARKS;
}

static uint64 *
release_mark(const char *key, int keylen)
{
	return &release_marks[release_mark_index(key, keylen)];
}

/*
 * Is a release that handed the key to a local waiter still unanswered?
 * (A collision of hashes only holds a synced try back until that other
 * release is answered.)
 */
bool
worker_release_inflight(const char *key, int keylen)
{
	return release_handing[release_mark_index(key, keylen)] > 0;
}

/*
 * The number of the latest release of a key that no waiter was handed.
 */
uint64
worker_release_mark(const char *key, int keylen)
{
	return *release_mark(key, keylen);
}

/*
 * The number of releases counted so far, for a try about to go out.
 */
uint64
worker_releases_sent(void)
{
	return releases_sent;
}

/*
 * The key may have been freed with nobody here handed it: tries on the
 * wire must not sleep on their busy answers.
 */
void
worker_note_release(const char *key, int keylen)
{
	*release_mark(key, keylen) = ++releases_sent;
}

/*
 * A release redirected in a Redis Cluster (ASK: its slot is migrating)
 * freed the lock on the importing node, and its sharded unlock message
 * went to that node's subscribers only, while the waiters, Redisson's
 * and ours, are subscribed on the node that still owns the slot, which
 * delivers SPUBLISH until the migration ends: publish the kind's free
 * message on the kind's channel there too.  A second message costs a
 * waiter a try at most.
 */
void
worker_publish_unlock(RlockConn *conn, RlockKind kind, const char *key,
					  int keylen)
{
	WorkerCmd  *wc;
	RlockArgs  *args;
	char	   *channel;

	if (!rlock_redis_cluster() ||
		!(rlock_redis_pubsub() & RLOCK_PUBSUB_SHARDED) ||
		!rlock_conn_ready(conn))
		return;
	channel = palloc(RLOCK_CHANNEL_MAXLEN(keylen));
	args = worker_args();
	rlock_args_cstr(args, "SPUBLISH");
	rlock_args_add(args, channel,
				   rlock_kinds[kind]->channel(channel, key, keylen));
	rlock_args_cstr(args, rlock_kinds[kind]->free_message);
	pfree(channel);
	wc = worker_cmd_new(WORKER_CMD_PUBLISH);
	wc->cmd.shape = RLOCK_SHAPE_INTEGER;
	(void) worker_cmd_send(conn, wc, args);
}

static void worker_send_yield(RlockConn *conn, RlockKind kind,
							  const char *key, int keylen);

/*
 * Send the release that leaves "target" holds of the entry in Redis.  A
 * release that frees the lock for others (the kind's hand_off says for
 * how many) hands it to local waiters right behind it.
 */
static void
worker_send_release(int index, int32 target, int64 lease_ms)
{
	RlockHold  *h = rlock_hold(index);
	const RlockKindMethod *kind = rlock_kinds[h->kind];
	WorkerCmd  *wc;
	RlockArgs  *args;
	RlockKindHold kh;
	int			hand_off;

	/* freed for a local waiter: maybe straight to it (transfer.c) */
	if (target == 0 && worker_send_transfer(index))
		return;

	wc = worker_cmd_new(WORKER_CMD_RELEASE);
	args = worker_args();
	/* a release on its way keeps the entry, its key and owner */
	kh.key = h->key;
	kh.keylen = h->keylen;
	kh.owner_id = h->owner_id;
	kh.mode = h->mode;
	kh.waited = false;
	kh.queue_ms = 0;
	wc->hold = index;
	wc->target = target;
	wc->lease_ms = worker_lease(lease_ms);
	kind->release(args, &wc->cmd, &kh, target * kind->step, wc->lease_ms);
	if (!worker_cmd_send(worker_hold_conn(index), wc, args))
	{
		rlock_hold_release_unsent(index);
		return;
	}
	hand_off = kind->hand_off(target * kind->step);
	if (hand_off != 0)
	{
		/*
		 * An acquire of this instance on the wire now cannot be reached by
		 * a hand-off: if none took it, such a try that meets the lock still
		 * held tries again instead of sleeping.
		 */
		wc->handoff = rlock_waiters_hand_off(h->kind, h->key, h->keylen,
											 hand_off);
		if (wc->handoff == 0)
			worker_note_release(h->key, h->keylen);
		else
			worker_release_handing(h->key, h->keylen, 1);
		if (wc->handoff == 0 && kind->yield != NULL &&
			rlock_waiters_holding_back(h->kind, h->key, h->keylen))
			worker_send_yield(worker_hold_conn(index), h->kind, h->key,
							  h->keylen);
	}
}

/*
 * The release just sent frees the lock for other clients while this
 * instance's line holds back: rlock's waiters elsewhere, woken by the
 * same unlock message, would take it first (their tries are quicker than
 * most clients'), so the lock is marked yielded for RLOCK_YIELD_MS, right
 * behind the release.  Redis runs the two back to back: nothing another
 * client sends comes between.
 */
static void
worker_send_yield(RlockConn *conn, RlockKind kind, const char *key, int keylen)
{
	WorkerCmd  *wc = worker_cmd_new(WORKER_CMD_PUBLISH);
	RlockArgs  *args = worker_args();

	rlock_kinds[kind]->yield(args, &wc->cmd, key, keylen, RLOCK_YIELD_MS);
	(void) worker_cmd_send(conn, wc, args);
}

/*
 * A release that handed the key to a local waiter is sent (delta 1) or
 * answered (-1).
 */
void
worker_release_handing(const char *key, int keylen, int delta)
{
	int			i = release_mark_index(key, keylen);

	release_handing[i] += delta;
	Assert(release_handing[i] >= 0);
}

static void worker_resync_later(void);

/*
 * Has the entry a count to restate that was not sent?
 */
static bool
resync_pending(int index)
{
	RlockHold	h;

	rlock_hold_read(index, &h);
	return h.in_use && !h.acquiring && h.resync;
}

/*
 * A hold entry came off the ring: bring Redis to the count it should hold
 * after the releases queued on it.  While an acquire for the entry is on
 * the wire nothing is sent; its reply puts the entry back on the ring.
 * The entry's queued flag is cleared first thing (rlock_hold_dequeue),
 * before anything that may fail (rlock_owners_note allocates): a worker
 * that died in between would leave it flagged as queued, off the ring,
 * and the next one would never send it (worker_recover_holds queues only
 * what is not flagged).
 */
void
worker_sync_hold(int index)
{
	bool		may_send;
	bool		send;
	int32		target = 0;
	int64		lease_ms = 0;

	/* the sync connection's fence is up, if the entry waits for it */
	may_send = rlock_conn_ready(worker_hold_conn(index)) &&
		worker_sync_may_resync(index);
	send = rlock_hold_dequeue(index, may_send, &target, &lease_ms);
	rlock_owners_note(index);
	if (send)
	{
		worker_send_release(index, target, lease_ms);
		return;
	}

	/*
	 * Held back for want of a connection: in a Redis Cluster, look again
	 * in a while, routed by the map of then.  A primary's connection is
	 * made only when something is routed to it (no connection becoming
	 * ready would bring the entry back), and after a failover nothing
	 * else may go to the new primary.
	 */
	if (rlock_redis_cluster() && resync_pending(index))
		worker_resync_later();
	rlock_hold_try_free(index);
}

/*
 * Put an entry back on the ring if it has something to send.
 */
void
worker_requeue_hold(int index)
{
	(void) rlock_hold_requeue(index);
}

void
worker_requeue_all_holds(void)
{
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
		worker_requeue_hold(i);
}

/*
 * Releases refused for a passing reason are due again.
 */
void
worker_releases_tick(TimestampTz now)
{
	if (resync_at != 0 && now >= resync_at)
	{
		resync_at = 0;
		worker_requeue_all_holds();
	}
}

TimestampTz
worker_releases_next(void)
{
	return resync_at != 0 ? resync_at : DT_NOEND;
}

static void
worker_resync_later(void)
{
	if (resync_at == 0)
		resync_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												RLOCK_RESYNC_DELAY_MS);
}

/*
 * Warn about a release Redis refused, at most once per interval: a Redis
 * that refuses one (out of memory, read-only replica, missing permission)
 * usually refuses them all.
 */
static void
worker_warn_release(RlockHold *h, const char *error, bool again)
{
	TimestampTz now = GetCurrentTimestamp();

	if (release_warned_at != 0 &&
		now < TimestampTzPlusMilliseconds(release_warned_at,
										  RLOCK_WARN_INTERVAL_MS))
		return;
	release_warned_at = now;
	ereport(WARNING,
			(errmsg("Redis refused to release lock \"%s\"", h->key),
			 errdetail_internal("%s", error),
			 again ? errhint("The release will be sent again.") : 0));
}

void
worker_release_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	RlockHold  *h = rlock_hold(wc->hold);
	RlockReleased released = RLOCK_RELEASED_INVALID;
	RlockAmount freed = 0;

	if (reply != NULL && reply->type != RLOCK_REPLY_ERROR)
	{
		released = rlock_kinds[h->kind]->release_result(reply, &freed);
		if (released == RLOCK_RELEASED_INVALID)
		{
			freed = 0;
			worker_unknown_status(conn, wc, h->kind);
			reply = NULL;		/* as good as lost */
		}
	}

	if (wc->handoff != 0)
		worker_release_handing(h->key, h->keylen, -1);

	/* no unlock message, or maybe none, to let pass */
	if (wc->handoff == RLOCK_HANDED_OFF_ECHO && freed == 0)
		rlock_waiters_echo_cancel(h->kind, h->key, h->keylen);
	/* whether someone besides this instance waits for it */
	if (freed > 0 && rlock_kinds[h->kind]->release_heard != NULL)
		rlock_waiters_heard(h->kind, h->key, h->keylen,
							rlock_kinds[h->kind]->release_heard(reply));

	/* freed on a slot's importing node (ASK): its waiters are on the owner */
	if (freed > 0 && wc->cmd.asked && worker_hold_conn(wc->hold) != conn)
		worker_publish_unlock(worker_hold_conn(wc->hold), h->kind, h->key,
							  h->keylen);

	worker_release_answered(conn, &wc->cmd, wc->hold, reply,
							released == RLOCK_RELEASED_NOT_HELD, wc->target,
							(wc->target > 0) ?
							TimestampTzPlusMilliseconds(wc->cmd.sent_at,
														wc->lease_ms) : 0);
}

/*
 * What the answer to a command that left "target" holds of the entry
 * "index" in Redis (a release, a transfer) means for the entry: NULL when
 * lost, "not_held" when Redis had no hold of it left, else OK (the holds
 * left last until "expires" if target is above zero) or an error.  The
 * count is restated if the outcome is unknown or Redis refused it for now.
 */
void
worker_release_answered(RlockConn *conn, RlockCmd *cmd, int index,
						const RlockReply *reply, bool not_held, int32 target,
						TimestampTz expires)
{
	RlockHold  *h = rlock_hold(index);
	RlockStatus status = RLOCK_STATUS_OK;
	bool		again = false;
	bool		later = false;

	if (reply == NULL)
		again = true;			/* outcome unknown: say it again later */
	else if (not_held)
		status = RLOCK_STATUS_NOT_HELD;
	else if (reply->type == RLOCK_REPLY_ERROR)
	{
		switch (rlock_reply_classify(reply))
		{
			case RLOCK_REPLY_NOSCRIPT:
				again = true;
				later = !rlock_scripts_reload(conn, cmd);
				break;
			case RLOCK_REPLY_WRONGTYPE:
				/* the key is not a lock any more: nothing of ours to release */
				status = RLOCK_STATUS_NOT_HELD;
				worker_warn_release(h, reply->str, false);
				break;
			default:
				/* BUSY, OOM, READONLY, LOADING ...: try again in a while */
				again = later = true;
				worker_warn_release(h, reply->str, true);
				release_refused[index] = true;
				strlcpy(release_refusal, reply->str, sizeof(release_refusal));
				break;
		}
	}

	if (rlock_hold_released(index, again, status, target, expires))
		rlock_count(RLOCK_STAT_LOST, 1);

	if (!again)
	{
		release_status[index] = status;
		release_refused[index] = false;
	}
	/*
	 * Sent again at once if a connection takes it: a reply lost with its
	 * connection is restated when one is ready again, but in a Redis
	 * Cluster a command may be answered as lost with its connection up,
	 * or the key's slot may have another primary by now.
	 */
	if (later)
		worker_resync_later();
	else if (again)
		worker_requeue_hold(index);
	rlock_hold_try_free(index);
	if (worker_parked())
		worker_unpark();
}

/*
 * A previous worker may have died with commands on the wire or entries
 * taken off the ring: their outcome is unknown, so their counts are sent
 * again once connected.  Its requests are all answered (see worker.c), so
 * it works on none.
 */
void
worker_recover_holds(void)
{
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		bool		queued = rlock_hold_recover(i);

		rlock_owners_note(i);	/* sessions carry on with their holds */
		if (!queued)
			rlock_hold_try_free(i);
	}
}
