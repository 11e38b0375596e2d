/*-------------------------------------------------------------------------
 *
 * pgwaits.c
 *		Who keeps a process waiting for a PostgreSQL (heavyweight) lock,
 *		read the way pg_blocking_pids() reads it, with what it waits for
 *		in PostgreSQL's own words: for the deadlock searches of backends
 *		(backend/deadlock.c) and of the worker (worker/wfg.c).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/pgwaits.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "storage/lmgr.h"
#include "storage/lock.h"

#include "shared/shared.h"

/*
 * Does "pid" (or a member of its lock group) wait for a heavyweight lock?
 * Then fill in "wait": what it waits for ("ShareLock on transaction 740"),
 * since when, and the lock group leaders that block it: those holding a
 * conflicting mode and those queued ahead of it asking one.  A prepared
 * transaction (pid 0) is left out: nothing waits behind it that could move.
 * Allocates in the current memory context.
 */
bool
rlock_pg_wait(int pid, RlockPgWait *wait)
{
	BlockedProcsData *data = GetBlockerStatusData(pid);
	int			p;

	memset(wait, 0, sizeof(RlockPgWait));
	for (p = 0; p < data->nprocs; p++)
	{
		BlockedProcData *bproc = &data->procs[p];
		LockInstanceData *locks = &data->locks[bproc->first_lock];
		int		   *ahead = &data->waiter_pids[bproc->first_waiter];
		LockInstanceData *waiting = NULL;
		LOCKMASK	conflicts;
		int			i;

		for (i = 0; i < bproc->num_locks; i++)
			if (locks[i].pid == bproc->pid && locks[i].waitLockMode != NoLock)
				waiting = &locks[i];
		if (waiting == NULL)
			continue;			/* granted meanwhile */
		conflicts = GetLockTagsMethodTable(&waiting->locktag)->
			conflictTab[waiting->waitLockMode];
		if (wait->what == NULL)
		{
			StringInfoData buf;

			initStringInfo(&buf);
			appendStringInfo(&buf, "%s on ",
							 GetLockmodeName(waiting->locktag.locktag_lockmethodid,
											 waiting->waitLockMode));
			DescribeLockTag(&buf, &waiting->locktag);
			wait->what = buf.data;
			wait->since = waiting->waitStart;
			wait->blockers = palloc(Max(data->nlocks, 1) * sizeof(int));
		}
		for (i = 0; i < bproc->num_locks; i++)
		{
			LockInstanceData *other = &locks[i];
			bool		blocks = false;
			int			k;

			if (other == waiting || other->leaderPid == waiting->leaderPid)
				continue;
			if (other->holdMask & conflicts)
				blocks = true;
			else if (other->waitLockMode != NoLock &&
					 (conflicts & LOCKBIT_ON(other->waitLockMode)))
			{
				for (k = 0; k < bproc->num_waiters; k++)
					if (ahead[k] == other->pid)
						blocks = true;
			}
			for (k = 0; blocks && k < wait->nblockers; k++)
				if (wait->blockers[k] == other->leaderPid)
					blocks = false;
			if (blocks && other->leaderPid != 0 && other->leaderPid != pid &&
				wait->nblockers < data->nlocks)
				wait->blockers[wait->nblockers++] = other->leaderPid;
		}
	}
	return wait->what != NULL;
}
