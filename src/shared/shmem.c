/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		rlock's shared memory: request slots, the hold table and the ring.
 *
 * Layout.  One RlockShared header, then MaxBackends request slots, then
 * rlock.max_locks hold entries, then the ring.  Slots and entries end in a
 * key buffer of rlock.max_key_length bytes, so both are addressed through
 * rlock_slot() and rlock_hold() rather than as C arrays.
 *
 * Locking protocol: src/shared/README.md, which says which spinlock
 * protects which field and who may read what when.  In short: spinlocks
 * only, a few stores each, never two at a time; a slot's sequence number
 * keeps a late result from completing a newer request; an entry's
 * generation tells a backend that an entry it remembers was reused.
 *
 * The owner uuid is chosen when shared memory is initialised, so owners
 * from before a crash restart can never be renewed or released by mistake.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "shared/shared.h"

RlockShared *rlock_shared = NULL;

static Size
rlock_slot_size(void)
{
	return MAXALIGN(offsetof(RlockSlot, key) + rlock_max_key_length + 1);
}

static Size
rlock_hold_size(void)
{
	return MAXALIGN(offsetof(RlockHold, key) + rlock_max_key_length + 1);
}

static Size
rlock_shmem_size(void)
{
	Size		size;

	size = MAXALIGN(sizeof(RlockShared));
	size = add_size(size, mul_size(MaxBackends, rlock_slot_size()));
	size = add_size(size, mul_size(rlock_max_locks, rlock_hold_size()));
	size = add_size(size, offsetof(RlockRing, items));
	size = add_size(size, mul_size(add_size(MaxBackends, rlock_max_locks) + 1,
								   sizeof(int)));
	return size;
}

/*
 * shmem_request_hook: reserve our shared memory.  MaxBackends is known here.
 */
void
rlock_shmem_request(void)
{
	RequestAddinShmemSpace(rlock_shmem_size());
}

/*
 * Write a random version 4 UUID in canonical lower-case form.
 */
static void
rlock_make_uuid(char *buf)
{
	uint8		b[16];

	if (!pg_strong_random(b, sizeof(b)))
		ereport(FATAL,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random owner id")));
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	snprintf(buf, RLOCK_UUID_LEN + 1,
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
			 "%02x%02x%02x%02x%02x%02x",
			 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			 b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/*
 * shmem_startup_hook: create or attach to our shared memory.  Runs in the
 * postmaster at start and after every crash restart, which reinitialises
 * everything, including the owner uuid.
 */
void
rlock_shmem_startup(void)
{
	bool		found;
	char	   *p;
	int			i;

	rlock_shared = NULL;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	p = ShmemInitStruct("rlock", rlock_shmem_size(), &found);
	rlock_shared = (RlockShared *) p;
	p += MAXALIGN(sizeof(RlockShared));

	if (!found)
	{
		RlockShared *s = rlock_shared;

		SpinLockInit(&s->mutex);
		s->worker_latch = NULL;
		s->worker_pid = 0;
		s->cmd_client_id = 0;
		s->cmd_run_id[0] = '\0';
		s->sync_client_id = 0;
		s->sync_run_id[0] = '\0';
		rlock_make_uuid(s->uuid);
		pg_atomic_init_u64(&s->next_owner_id, 1);
		pg_atomic_init_u32(&s->cmd_epoch, 1);
		pg_atomic_init_u64(&s->cmd_reply_at, 0);

		s->nslots = MaxBackends;
		s->slot_size = rlock_slot_size();
		s->nholds = rlock_max_locks;
		s->hold_size = rlock_hold_size();
		s->slots = p;
		p += s->nslots * s->slot_size;
		s->holds = p;
		p += s->nholds * s->hold_size;
		s->ring = (RlockRing *) p;

		for (i = 0; i < s->nslots; i++)
		{
			RlockSlot  *slot = rlock_slot(i);

			memset(slot, 0, offsetof(RlockSlot, key));
			SpinLockInit(&slot->mutex);
			slot->state = RLOCK_SLOT_IDLE;
			slot->hold = -1;
		}

		SpinLockInit(&s->holds_mutex);
		for (i = 0; i < s->nholds; i++)
		{
			RlockHold  *h = rlock_hold(i);

			memset(h, 0, offsetof(RlockHold, key));
			SpinLockInit(&h->mutex);
			h->next_free = (i + 1 < s->nholds) ? i + 1 : -1;
		}
		s->free_hold = 0;
		s->nfree = s->nholds;

		SpinLockInit(&s->ring->mutex);
		s->ring->head = 0;
		s->ring->tail = 0;
		/* one spare place: a full ring must not look empty */
		s->ring->size = s->nslots + s->nholds + 1;

		rlock_stats_init();
		memset(&s->status, 0, sizeof(s->status));
		pg_atomic_init_u32(&s->status.changecount, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

RlockSlot *
rlock_slot(int index)
{
	Assert(index >= 0 && index < rlock_shared->nslots);
	return (RlockSlot *) (rlock_shared->slots +
						  index * rlock_shared->slot_size);
}

RlockHold *
rlock_hold(int index)
{
	Assert(index >= 0 && index < rlock_shared->nholds);
	return (RlockHold *) (rlock_shared->holds +
						  index * rlock_shared->hold_size);
}

/*
 * Append an item to the ring.  The caller has set the item's queued flag,
 * which guarantees room.
 */
void
rlock_ring_push(int item)
{
	RlockRing  *ring = rlock_shared->ring;

	SpinLockAcquire(&ring->mutex);
	ring->items[ring->tail] = item;
	ring->tail = (ring->tail + 1) % ring->size;
	SpinLockRelease(&ring->mutex);
}

/*
 * Take the oldest item off the ring; false when it is empty.
 */
bool
rlock_ring_pop(int *item)
{
	RlockRing  *ring = rlock_shared->ring;
	bool		found = false;

	SpinLockAcquire(&ring->mutex);
	if (ring->head != ring->tail)
	{
		*item = ring->items[ring->head];
		ring->head = (ring->head + 1) % ring->size;
		found = true;
	}
	SpinLockRelease(&ring->mutex);
	return found;
}

/*
 * Allocate a hold entry for one key of this backend, pinned; the key's
 * first prefixlen bytes are the backend's rlock.key_prefix.  The last
 * "reserved" free entries are left to others (superusers).  Returns
 * RLOCK_HOLD_TABLE_FULL or RLOCK_HOLD_TABLE_RESERVED when there is none
 * to take; otherwise the index, with the entry's generation in
 * *generation.
 */
int
rlock_hold_alloc(uint64 owner_id, RlockKind kind, const char *key, int keylen,
				 int prefixlen, int reserved, uint32 *generation)
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
	h->in_use = true;
	h->owner_id = owner_id;
	h->kind = kind;
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
	*generation = h->generation;
	SpinLockRelease(&h->mutex);

	return index;
}

/*
 * Record what the backend holds on an entry, for the views.
 */
void
rlock_hold_publish(int index, int32 nsession, int32 nxact, int64 token,
				   TimestampTz acquired_at)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	h->nsession = nsession;
	h->nxact = nxact;
	h->token = token;
	h->acquired_at = acquired_at;
	SpinLockRelease(&h->mutex);
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
	if (h->in_use && h->generation == generation)
	{
		h->pinned = true;
		pinned = true;
	}
	SpinLockRelease(&h->mutex);
	return pinned;
}

/*
 * Is the entry still the one this backend allocated?
 */
bool
rlock_hold_is_current(int index, uint32 generation)
{
	RlockHold  *h = rlock_hold(index);
	bool		current;

	SpinLockAcquire(&h->mutex);
	current = (h->in_use && h->generation == generation);
	SpinLockRelease(&h->mutex);
	return current;
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
	h->pinned = false;
	SpinLockRelease(&h->mutex);
	rlock_hold_try_free(index);
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
	lost = h->lost;
	h->lost = false;
	SpinLockRelease(&h->mutex);
	return lost;
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
	h->lease_ms = lease_ms;
	h->renew = renew;
	SpinLockRelease(&h->mutex);
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
		SpinLockRelease(&rlock_shared->holds_mutex);
	}
	return freed;
}

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

	SpinLockAcquire(&h->mutex);
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
 * Set the worker's latch, if a worker runs.
 */
void
rlock_wake_worker(void)
{
	Latch	   *latch;

	SpinLockAcquire(&rlock_shared->mutex);
	latch = rlock_shared->worker_latch;
	SpinLockRelease(&rlock_shared->mutex);

	if (latch != NULL)
		SetLatch(latch);
}
