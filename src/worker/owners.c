/*-------------------------------------------------------------------------
 *
 * owners.c
 *		The worker's index of hold entries by owner.
 *
 * A VERIFY or BARRIER request concerns every entry of its owner (session),
 * and the table of entries has rlock.max_locks of them: looking at all of
 * them for every commit would cost more than the round trip to Redis.  So
 * the worker lists, for each owner, the entries it has seen: an entry
 * reaches the worker (an acquire request, or releases queued on the ring)
 * before it can hold anything or have anything to send, so the list
 * covers every entry such a request must look at.
 *
 * Entries are freed and reused by anyone, so a list is only a superset:
 * a listed entry counts while it is in use by the same owner and its
 * listing is the latest one (each listing of an entry is numbered).  Lists
 * shed what no longer counts whenever they are read, and a periodic sweep
 * drops the lists of owners that ended.  All of it is private to the
 * worker.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/owners.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "worker/worker_int.h"

typedef struct OwnerList
{
	uint64		owner_id;		/* hash key */
	int			n;
	int			size;
	int		   *holds;			/* entry indexes */
	uint32	   *listings;		/* the listing number of each */
} OwnerList;

static HTAB *owners = NULL;
static bool owners_new = false;	/* an owner was listed for the first time */
static uint64 *listed_owner;	/* per entry: owner whose list has it, or 0 */
static uint32 *listing;			/* per entry: number of its latest listing */

void
rlock_owners_init(void)
{
	HASHCTL		ctl;
	int			nholds = rlock_shared->nholds;

	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(OwnerList);
	ctl.hcxt = rlock_worker_context;
	owners = hash_create("rlock owners", 64, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	listed_owner = MemoryContextAllocZero(rlock_worker_context,
										  sizeof(uint64) * nholds);
	listing = MemoryContextAllocZero(rlock_worker_context,
									 sizeof(uint32) * nholds);
}

/*
 * The worker sees entry "index": list it under its owner, if it is not
 * there already.
 */
void
rlock_owners_note(int index)
{
	RlockHold	h;
	uint64		owner_id;
	OwnerList  *list;
	bool		found;

	rlock_hold_read(index, &h);
	owner_id = h.owner_id;
	if (!h.in_use || owner_id == 0 || listed_owner[index] == owner_id)
		return;

	list = (OwnerList *) hash_search(owners, &owner_id, HASH_ENTER, &found);
	if (!found)
	{
		owners_new = true;
		list->n = 0;
		list->size = 8;
		list->holds = MemoryContextAlloc(rlock_worker_context,
										 sizeof(int) * list->size);
		list->listings = MemoryContextAlloc(rlock_worker_context,
											sizeof(uint32) * list->size);
	}
	else if (list->n == list->size)
	{
		list->size *= 2;
		list->holds = repalloc(list->holds, sizeof(int) * list->size);
		list->listings = repalloc(list->listings,
								  sizeof(uint32) * list->size);
	}
	listed_owner[index] = owner_id;
	list->holds[list->n] = index;
	list->listings[list->n] = ++listing[index];
	list->n++;
}

/*
 * Keep the entries of a list that still count.  Deletes the list if none
 * does (and returns NULL).
 */
static OwnerList *
owners_prune(OwnerList *list)
{
	int			kept = 0;
	int			i;

	for (i = 0; i < list->n; i++)
	{
		int			index = list->holds[i];
		RlockHold	h;

		if (listed_owner[index] != list->owner_id ||
			listing[index] != list->listings[i])
			continue;			/* listed again since, elsewhere or here */
		rlock_hold_read(index, &h);
		if (!h.in_use || h.owner_id != list->owner_id)
		{
			listed_owner[index] = 0;
			continue;
		}
		list->holds[kept] = index;
		list->listings[kept] = list->listings[i];
		kept++;
	}
	list->n = kept;
	if (kept > 0)
		return list;
	pfree(list->holds);
	pfree(list->listings);
	hash_search(owners, &list->owner_id, HASH_REMOVE, NULL);
	return NULL;
}

/*
 * The entries of an owner that may matter: every entry in use by it that
 * the worker has seen (and possibly a few it has let go since).  Returns
 * their number; *holds is valid until the next call into this file.
 */
int
rlock_owners_holds(uint64 owner_id, const int **holds)
{
	OwnerList  *list;

	list = (OwnerList *) hash_search(owners, &owner_id, HASH_FIND, NULL);
	if (list != NULL)
		list = owners_prune(list);
	if (list == NULL)
	{
		*holds = NULL;
		return 0;
	}
	*holds = list->holds;
	return list->n;
}

/*
 * Drop what no longer counts from every list: the lists of sessions that
 * took locks and ended are only ever read here.
 */
void
rlock_owners_sweep(void)
{
	HASH_SEQ_STATUS seq;
	OwnerList  *list;

	hash_seq_init(&seq, owners);
	while ((list = (OwnerList *) hash_seq_search(&seq)) != NULL)
		(void) owners_prune(list);
}

/*
 * Whether an owner was listed for the first time since the last call.
 */
bool
rlock_owners_changed(void)
{
	bool		changed = owners_new;

	owners_new = false;
	return changed;
}

/*
 * Call fn for every owner that has entries in use, with its backend's pid.
 */
void
rlock_owners_each(void (*fn) (uint64 owner_id, int pid, void *arg), void *arg)
{
	HASH_SEQ_STATUS seq;
	OwnerList  *list;

	hash_seq_init(&seq, owners);
	while ((list = (OwnerList *) hash_seq_search(&seq)) != NULL)
	{
		RlockHold	h;

		if (owners_prune(list) == NULL)
			continue;
		rlock_hold_read(list->holds[0], &h);
		fn(list->owner_id, h.pid, arg);
	}
}
