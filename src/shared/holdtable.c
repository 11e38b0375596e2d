/*-------------------------------------------------------------------------
 *
 * holdtable.c
 *		The transitions of the shared hold table: every change of a hold
 *		entry's fields under its mutex, each a named operation that
 *		asserts the state it expects, as PostgreSQL's lock.c keeps the
 *		changes of a lock in GrantLock and UnGrantLock.
 *
 * An entry's life (the locking rules are in shared/README.md):
 *
 *	 free --alloc--> in use, pinned --unpin--> in use --try_free--> free
 *	   ^                                                          |
 *	   +---------------------- generation + 1 --------------------+
 *
 * While it is in use, the owning backend pins it for as long as it holds
 * the key or waits for it (pin, unpin), says what it holds (describe,
 * publish), hands holds back (rlock_queue_release) and takes note of a
 * loss (take_loss).  The worker counts the requests it works on for the
 * entry (ref, unref); sends one acquire at a time (acquire_begin, then
 * grant or refuse, and settle once replicas confirmed a grant or did
 * not); takes the entry off the ring and sends the count Redis should
 * hold (dequeue, then released or release_unsent); puts it back on the
 * ring when something is left to send (requeue); records what batches
 * found (lose, extend); and, when it starts, restates whatever a worker
 * that died left on the wire (recover).  Whichever side finds the entry
 * idle frees it (try_free).
 *
 * Nothing outside src/shared takes an entry's mutex.  Readers copy the
 * entry (rlock_hold_read) and look at the copy; the key, which does not
 * change while the entry is in use, is copied outside the mutex and kept
 * only if the generation did not change meanwhile (rlock_hold_copy_key).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/holdtable.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "shared/shared.h"

/*
 * What holds for every entry in use, whoever changes it.  The caller holds
 * the entry's mutex.
 */
static inline void
hold_check(const RlockHold *h)
{
	Assert(h->in_use);
	Assert(h->count >= 0 && h->to_release >= 0 && h->unacked >= 0 &&
		   h->worker_refs >= 0 && h->nsession >= 0 && h->nxact >= 0);
}

/*
 * Redis confirmed that an entry's holds last until "expires".  Only a
 * confirmation on the current command connection lets a commit do without
 * asking again (backend/xact.c).  The caller holds the entry's mutex.
 */
static inline void
hold_confirm(RlockHold *h, TimestampTz expires)
{
	h->expires_at = expires;
	h->epoch = pg_atomic_read_u32(&rlock_shared->cmd_epoch);
}

/*
 * Mark an entry lost; true the first time, when the caller counts the loss
 * (RLOCK_STAT_LOST) once it has let go of the mutex, which it holds now.
 */
static inline bool
hold_mark_lost(RlockHold *h)
{
	bool		first = !h->lost;

	h->lost = true;
	h->track_epoch = 0;
	return first;
}

/*---- readers ----*/

/*
 * Copy entry "index" (all but its key) as it is now.
 */
void
rlock_hold_read(int index, RlockHold *copy)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	*copy = *h;
	SpinLockRelease(&h->mutex);
}

/*
 * Copy the key of an entry that was in use with "generation", and tell the
 * length of its holder's rlock.key_prefix; NULL if the entry was freed (and
 * maybe reused) meanwhile.  The copy is palloc'd.
 */
char *
rlock_hold_copy_key(int index, uint32 generation, int *keylen, int *prefixlen)
{
	RlockHold  *h = rlock_hold(index);
	RlockHold	copy;
	char	   *key;

	rlock_hold_read(index, &copy);
	if (!rlock_hold_is_current(&copy, generation))
		return NULL;

	key = palloc(copy.keylen + 1);
	memcpy(key, h->key, copy.keylen);
	key[copy.keylen] = '\0';

	rlock_hold_read(index, &copy);
	if (!rlock_hold_is_current(&copy, generation))
	{
		pfree(key);
		return NULL;
	}
	*keylen = copy.keylen;
	*prefixlen = copy.prefixlen;
	return key;
}

/*---- the owning backend ----*/

/*
 * Allocate a hold entry for one key of this backend, pinned; the key's
 * first prefixlen bytes are the backend's rlock.key_prefix.  The last
 * "reserved" free entries are left to others (superusers).  Returns
 * RLOCK_HOLD_TABLE_FULL or RLOCK_HOLD_TABLE_RESERVED when there is none
 * to take; otherwise the index, with the entry's generation in
 * *generation.
 */
int
rlock_hold_alloc(uint64 owner_id, RlockKind kind, int mode, const char *key,
				 int keylen, int prefixlen, int reserved, uint32 *generation)
{
	RlockHold  *h;
	int			index;

	SpinLockAcquire(&rlock_shared->holds_mutex);
	index = rlock_shared->free_hold;
	if (index >= 0 && rlock_shared->nfree <= reserved)
		index = RLOCK_HOLD_TABLE_RESERVED;
	else if (index >= 0)
	{
		rlock_shared->free_hold = rlock_hold(index)->next_free;
		rlock_shared->nfree--;
		Assert(rlock_shared->nfree >= 0);
	}
	SpinLockRelease(&rlock_shared->holds_mutex);

	if (index < 0)
		return index;

	/* off the free list and not in use: nobody else reads the key now */
	h = rlock_hold(index);
	memcpy(h->key, key, keylen);
	h->key[keylen] = '\0';

	SpinLockAcquire(&h->mutex);
	/* an entry is freed only once nothing is left to send or hear */
	Assert(!h->in_use && !h->queued && !h->acquiring && h->unacked == 0);
	h->in_use = true;
	h->owner_id = owner_id;
	h->kind = (uint8) kind;
	h->mode = (uint8) mode;
	h->keylen = keylen;
	h->prefixlen = prefixlen;
	h->pinned = true;
	h->worker_refs = 0;
	h->to_release = 0;
	h->lease_ms = 0;
	h->renew = false;
	h->count = 0;
	h->acquiring = false;
	h->unacked = 0;
	h->resync = false;
	h->lost = false;
	h->queued = false;
	h->pid = MyProcPid;
	h->userid = GetSessionUserId();
	h->nsession = 0;
	h->nxact = 0;
	h->token = 0;
	h->acquired_at = 0;
	h->expires_at = 0;
	h->epoch = 0;
	h->track_epoch = 0;
	*generation = h->generation;
	SpinLockRelease(&h->mutex);

	return index;
}

/*
 * Pin an entry this backend used before, if it is still the same entry
 * (not freed since).  A backend must reuse its live entry for a key rather
 * than allocate a second one: two entries for one owner and key would each
 * believe they know the hold count in Redis.
 */
bool
rlock_hold_pin(int index, uint32 generation)
{
	RlockHold  *h = rlock_hold(index);
	bool		pinned = false;

	SpinLockAcquire(&h->mutex);
	if (rlock_hold_is_current(h, generation))
	{
		/* only its backend pins it, and that one let it go */
		Assert(!h->pinned);
		h->pinned = true;
		pinned = true;
	}
	SpinLockRelease(&h->mutex);
	return pinned;
}

/*
 * The backend no longer holds the key nor waits for it: let the entry go
 * once the worker is done with it.
 */
void
rlock_hold_unpin(int index)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->pinned);
	h->pinned = false;
	SpinLockRelease(&h->mutex);
	rlock_hold_try_free(index);
}

/*
 * Record what the backend holds on an entry, for the views.
 */
void
rlock_hold_publish(int index, int32 nsession, int32 nxact, int64 token,
				   TimestampTz acquired_at)
{
	RlockHold  *h = rlock_hold(index);

	Assert(nsession >= 0 && nxact >= 0);
	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->pinned);
	h->nsession = nsession;
	h->nxact = nxact;
	h->token = token;
	h->acquired_at = acquired_at;
	SpinLockRelease(&h->mutex);
}

/*
 * Record the lease of the newest hold and whether any hold uses the
 * watchdog, after the backend gained a hold.
 */
void
rlock_hold_describe(int index, int64 lease_ms, bool renew)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->pinned);
	h->lease_ms = lease_ms;
	h->renew = renew;
	SpinLockRelease(&h->mutex);
}

/*
 * Has the worker seen Redis without this entry's holds since the backend
 * last asked?  Asking clears the mark.
 */
bool
rlock_hold_take_loss(int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		lost;

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->pinned);
	lost = h->lost;
	h->lost = false;
	SpinLockRelease(&h->mutex);
	return lost;
}

/*---- either side ----*/

/*
 * Hand "count" holds of an entry back to the worker, which sends one
 * release for everything queued on the entry.  lease_ms and renew describe
 * the holds that remain.  Needs no memory, no slot and no reply, so the
 * transaction and exit callbacks can use it; the caller wakes the worker.
 * A negative lease_ms leaves the description of the remaining holds as it
 * is (used when handing back a grant that its request gave up on).
 */
void
rlock_queue_release(int index, int count, int64 lease_ms, bool renew)
{
	RlockHold  *h = rlock_hold(index);
	bool		push;

	Assert(count > 0);
	SpinLockAcquire(&h->mutex);
	hold_check(h);
	h->to_release += count;
	if (lease_ms >= 0)
	{
		h->lease_ms = lease_ms;
		h->renew = renew;
	}
	push = !h->queued;
	h->queued = true;
	SpinLockRelease(&h->mutex);

	if (push)
		rlock_ring_push(index);
}

/*
 * Free a hold entry if nobody needs it any more: the backend has unpinned
 * it and the worker has nothing to send or to hear about it.  Either side
 * may call this after making the entry idle.
 */
bool
rlock_hold_try_free(int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		freed = false;

	SpinLockAcquire(&h->mutex);
	if (h->in_use && !h->pinned && h->worker_refs == 0 && h->count == 0 &&
		h->to_release == 0 && !h->queued && !h->acquiring &&
		h->unacked == 0 && !h->resync)
	{
		h->in_use = false;
		h->generation++;
		freed = true;
	}
	SpinLockRelease(&h->mutex);

	if (freed)
	{
		SpinLockAcquire(&rlock_shared->holds_mutex);
		h->next_free = rlock_shared->free_hold;
		rlock_shared->free_hold = index;
		rlock_shared->nfree++;
		Assert(rlock_shared->nfree <= rlock_shared->nholds);
		SpinLockRelease(&rlock_shared->holds_mutex);
	}
	return freed;
}

/*---- the worker: requests ----*/

/*
 * Count the worker in an entry's worker_refs for a request, if the entry
 * is still the one the backend named.  False if it is not: the backend
 * gave the request up and the entry was freed.
 */
bool
rlock_hold_ref(int index, uint32 generation)
{
	RlockHold  *h = rlock_hold(index);
	bool		current;

	SpinLockAcquire(&h->mutex);
	current = rlock_hold_is_current(h, generation);
	if (current)
	{
		hold_check(h);
		h->worker_refs++;
	}
	SpinLockRelease(&h->mutex);
	return current;
}

/*
 * The worker is done with a request for the entry: let the entry go if
 * nothing else needs it.
 */
void
rlock_hold_unref(int index)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->worker_refs > 0);
	h->worker_refs--;
	SpinLockRelease(&h->mutex);
	rlock_hold_try_free(index);
}

/*
 * An acquire for the entry goes out: it asks Redis for "amount" more than
 * the count the worker knows, which is returned.  One at a time.
 */
int32
rlock_hold_acquire_begin(int index, int32 amount)
{
	RlockHold  *h = rlock_hold(index);
	int32		target;

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->worker_refs > 0 && !h->acquiring && amount > 0);
	target = h->count + amount;
	h->acquiring = true;
	h->adding = amount;
	SpinLockRelease(&h->mutex);
	return target;
}

/*
 * Redis granted the acquire: it holds "count" (the target sent) until
 * "expires".  With "confirming", the acquire stays in progress until
 * replicas confirm the grant (rlock_hold_settle).  With "lost", the owner's
 * earlier holds were gone.  True if that loss is news.
 */
bool
rlock_hold_grant(int index, int32 count, TimestampTz expires,
				 bool confirming, bool lost)
{
	RlockHold  *h = rlock_hold(index);
	bool		newly_lost = false;

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->acquiring && count == h->count + h->adding);
	h->acquiring = confirming;
	h->count = count;
	hold_confirm(h, expires);
	if (lost)
		newly_lost = hold_mark_lost(h);
	SpinLockRelease(&h->mutex);
	return newly_lost;
}

/*
 * The acquire was not granted: the lock is busy, Redis refused it, or it
 * never left (both false).  With "lost", the owner's earlier holds were
 * gone; otherwise, with "doubt", it may have run without its answer
 * arriving, and the count the worker knows is to be restated.  True if the
 * loss is news.
 */
bool
rlock_hold_refuse(int index, bool doubt, bool lost)
{
	RlockHold  *h = rlock_hold(index);
	bool		newly_lost = false;

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->acquiring);
	h->acquiring = false;
	if (lost)
		newly_lost = hold_mark_lost(h);
	else if (doubt)
		h->resync = true;
	SpinLockRelease(&h->mutex);
	return newly_lost;
}

/*
 * Replicas confirmed a grant of "count" holds, or did not in time: then
 * the grant is undone by restating the count before it.
 */
void
rlock_hold_settle(int index, int32 count, bool confirmed)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->acquiring && h->count == count && count > 0);
	h->acquiring = false;
	if (!confirmed)
	{
		h->count = count - h->adding;
		h->resync = true;
	}
	SpinLockRelease(&h->mutex);
}

/*
 * What the entry's latest acquire added to its count (its request's
 * amount: a semaphore's permits, one for a lock).  That much is handed
 * back when Redis granted it to a request its backend gave up on.
 */
int32
rlock_hold_added(int index)
{
	RlockHold  *h = rlock_hold(index);
	int32		added;

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(!h->acquiring && h->adding > 0 && h->adding <= h->count);
	added = h->adding;
	SpinLockRelease(&h->mutex);
	return added;
}

/*---- the worker: releases ----*/

/*
 * The entry came off the ring: fold the releases queued on it into the
 * count Redis should hold, and, if that count is to be sent and
 * "may_send", return true with the count and the lease of the remaining
 * holds; the release is then on its way (unacked).  Nothing changes while
 * an acquire is on the wire: its answer puts the entry back on the ring.
 */
bool
rlock_hold_dequeue(int index, bool may_send, int32 *target, int64 *lease_ms)
{
	RlockHold  *h = rlock_hold(index);
	bool		send = false;

	SpinLockAcquire(&h->mutex);
	/* an entry on the ring cannot be freed */
	hold_check(h);
	Assert(h->queued);
	h->queued = false;
	if (!h->acquiring)
	{
		if (h->to_release > 0)
		{
			h->count = Max(h->count - h->to_release, 0);
			h->to_release = 0;
			h->resync = true;
		}
		if (h->resync && may_send)
		{
			send = true;
			h->resync = false;
			h->unacked++;
			*target = h->count;
			*lease_ms = h->lease_ms;
		}
		Assert(h->count >= 0 && h->unacked >= 0 && h->to_release == 0);
	}
	SpinLockRelease(&h->mutex);
	return send;
}

/*
 * A release rlock_hold_dequeue() let go could not be sent: the count is
 * restated later.
 */
void
rlock_hold_release_unsent(int index)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->unacked > 0);
	h->unacked--;
	h->resync = true;
	SpinLockRelease(&h->mutex);
}

/*
 * The answer to a release that left "target" holds: "again" when its
 * outcome is unknown or Redis refused it for now (the count is restated);
 * else status OK (Redis holds the target, until "expires" if it is above
 * zero) or NOT_HELD (the holds were gone: a loss, unless none were to
 * remain).  True if the loss is news.  Once none remain, no loss is left
 * marked.
 */
bool
rlock_hold_released(int index, bool again, RlockStatus status, int32 target,
					TimestampTz expires)
{
	RlockHold  *h = rlock_hold(index);
	bool		newly_lost = false;

	Assert(again || status == RLOCK_STATUS_OK ||
		   status == RLOCK_STATUS_NOT_HELD);
	SpinLockAcquire(&h->mutex);
	hold_check(h);
	Assert(h->unacked > 0);
	h->unacked--;
	if (again)
		h->resync = true;
	else if (status == RLOCK_STATUS_NOT_HELD && target > 0)
		newly_lost = hold_mark_lost(h);
	else if (status == RLOCK_STATUS_OK)
		hold_confirm(h, expires);

	/*
	 * None left: a loss found before was of holds all given back now.  Its
	 * mark would condemn the next grant, should the backend take the key
	 * again before the entry is freed (a set taking back a member it gave
	 * back, a transaction after a ROLLBACK).
	 */
	if (!again && target == 0)
		h->lost = false;
	SpinLockRelease(&h->mutex);
	return newly_lost;
}

/*
 * Put an entry back on the ring if it has something to send and is not
 * there yet.  True if it was put there.
 */
bool
rlock_hold_requeue(int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		push;

	SpinLockAcquire(&h->mutex);
	push = h->in_use && !h->queued && !h->acquiring &&
		(h->to_release > 0 || h->resync);
	if (push)
		h->queued = true;
	SpinLockRelease(&h->mutex);
	if (push)
		rlock_ring_push(index);
	return push;
}

/*
 * A new worker starts: whatever the last one had on the wire for the
 * entry has an unknown outcome, so its count is restated, and the last
 * one's requests are all answered, so it counts none.  Nor does it track
 * the entry's key: it numbers its armings of tracking afresh, and Redis
 * announces nothing to it of a key the last one read.  True if the entry
 * was put on the ring (or is there already).
 */
bool
rlock_hold_recover(int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		push = false;
	bool		queued;

	SpinLockAcquire(&h->mutex);
	h->worker_refs = 0;
	h->track_epoch = 0;
	if (h->in_use &&
		(h->acquiring || h->unacked > 0 || h->to_release > 0 ||
		 h->resync || h->queued))
	{
		h->acquiring = false;
		h->unacked = 0;
		h->resync = true;
		push = !h->queued;
		h->queued = true;
	}
	queued = h->queued;
	SpinLockRelease(&h->mutex);
	if (push)
		rlock_ring_push(index);
	return queued;
}

/*---- the worker: what batches and forced releases found ----*/

/*
 * Redis no longer has the holds of the entry allocated with "generation":
 * mark it lost, if it is still that entry (the result).  *newly says
 * whether the loss is news.
 */
bool
rlock_hold_lose(int index, uint32 generation, bool *newly)
{
	RlockHold  *h = rlock_hold(index);
	bool		current;

	*newly = false;
	SpinLockAcquire(&h->mutex);
	current = rlock_hold_is_current(h, generation);
	if (current)
	{
		hold_check(h);
		*newly = hold_mark_lost(h);
	}
	SpinLockRelease(&h->mutex);
	return current;
}

/*
 * Redis holds the entry allocated with "generation" until "expires": move
 * its lease end there (with extend_only, only if that is later), if it is
 * still that entry (the result).
 */
bool
rlock_hold_extend(int index, uint32 generation, TimestampTz expires,
				  bool extend_only)
{
	RlockHold  *h = rlock_hold(index);
	bool		current;

	SpinLockAcquire(&h->mutex);
	current = rlock_hold_is_current(h, generation);
	if (current)
	{
		hold_check(h);
		if (!extend_only || h->expires_at < expires)
			hold_confirm(h, expires);
	}
	SpinLockRelease(&h->mutex);
	return current;
}

/*
 * Redis tracks the key of the entry allocated with "generation" for us
 * under tracking epoch "epoch": any change by another client will be
 * announced.  A lost entry stays lost: nothing vouches for it.
 */
void
rlock_hold_track(int index, uint32 generation, uint32 epoch)
{
	RlockHold  *h = rlock_hold(index);

	Assert(epoch != 0);
	SpinLockAcquire(&h->mutex);
	if (rlock_hold_is_current(h, generation))
	{
		hold_check(h);
		if (!h->lost)
			h->track_epoch = epoch;
	}
	SpinLockRelease(&h->mutex);
}

/*
 * The entry's key may change unannounced: a change was announced, or a
 * command of ours writes it (which untracks it on the server).
 */
void
rlock_hold_untrack(int index, uint32 generation)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	if (rlock_hold_is_current(h, generation))
		h->track_epoch = 0;
	SpinLockRelease(&h->mutex);
}
