/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		rlock's shared memory: its layout and creation, the request slots
 *		and the ring.  The hold table's transitions are in holdtable.c.
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
	RequestNamedLWLockTranche("rlock", 1);
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
		pg_atomic_init_u32(&s->track_epoch, 0);
		pg_atomic_init_u64(&s->track_fresh_at, 0);

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
			slot->args.hold = -1;
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
		s->deadlock_lock = &(GetNamedLWLockTranche("rlock"))[0].lock;
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

	Assert(item >= -rlock_shared->nslots && item < rlock_shared->nholds);
	SpinLockAcquire(&ring->mutex);
	Assert(ring->head < ring->size && ring->tail < ring->size);
	/* one place is always left free: a full ring would look empty */
	Assert((ring->tail + 1) % ring->size != ring->head);
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
	Assert(ring->head < ring->size && ring->tail < ring->size);
	if (ring->head != ring->tail)
	{
		*item = ring->items[ring->head];
		ring->head = (ring->head + 1) % ring->size;
		found = true;
	}
	SpinLockRelease(&ring->mutex);
	Assert(!found ||
		   (*item >= -rlock_shared->nslots && *item < rlock_shared->nholds));
	return found;
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
