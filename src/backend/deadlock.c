/*-------------------------------------------------------------------------
 *
 * deadlock.c
 *		Deadlocks through this session's rlock wait, among the sessions of
 *		this instance (rlock.deadlock_detection = local).
 *
 * PostgreSQL's detector sees heavyweight lock waits only: a session that
 * waits for an rlock is, to it, a running process, so a cycle such as
 * "A holds rlock k and waits for B's row; B waits for k" would last until
 * lock_timeout.  A waiting session therefore looks for such cycles
 * itself, as a heavyweight lock waiter does: once its wait has lasted
 * deadlock_timeout, and again every deadlock_timeout while it lasts
 * (a cycle may be closed later by a wait that runs no check of its own:
 * a row wait, which PostgreSQL's detector checks without seeing ours).
 *
 * The graph's nodes are processes.  A process waits for
 *   - an rlock (its request slot carries an acquire the worker found
 *     busy): it is blocked by every other session of this instance that
 *     holds the key in a conflicting mode (the hold table; a hold the
 *     session has let go of, or one found lost, blocks nobody), or
 *   - a heavyweight lock (GetBlockerStatusData): it is blocked by the
 *     holders of conflicting modes and by the conflicting waiters ahead of
 *     it in the lock's queue, as pg_blocking_pids() says.
 * Holders elsewhere (another instance, a Redisson client) are dead ends.
 * A path from our own wait back to us is a deadlock.
 *
 * No false victim: the graph is not read in one instant (PostgreSQL's
 * detector holds every lock partition; the hold table and the slots have
 * no such lock), so a cycle found is only noted; the next look, a short
 * while later, must find the same cycle, each rlock wait the same request
 * and each heavyweight wait begun at the same time, before this session
 * gives up.  Every member of a deadlock waits and stays put; a cycle read
 * from states that never coexisted is gone by the second look.  Looks run
 * one at a time (rlock's LWLock), and the victim gives its request up
 * before the next look starts, so two waits of one cycle never both fail;
 * a grant the worker made first is taken instead (no error).
 *
 * The victim gets PostgreSQL's deadlock error: 40P01, "deadlock detected",
 * a detail line per wait of the cycle, the queries in the server log, and
 * pg_stat_database.deadlocks counts it.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/deadlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lwlock.h"
#include "utils/backend_status.h"
#include "utils/memutils.h"

#include "backend/backend.h"
#include "backend/backend_int.h"

/* The most processes one look visits; a larger graph is not checked */
#define DL_MAX_NODES	1000

/* What one process waits for, and who blocks it */
typedef struct DlWait
{
	int			pid;
	bool		known;			/* looked up already */
	uint64		ident;			/* rlock: the request's number; heavyweight:
								 * when the wait began */
	char	   *what;			/* "ExclusiveLock on rlock "k"" and the like,
								 * NULL if the process waits for nothing */
	int			nblockers;
	int		   *blockers;		/* pids (lock group leaders) */
	bool		on_path;		/* on the path being walked */
	bool		done;			/* walked: no way back to the start */
} DlWait;

typedef struct DlGraph
{
	DlWait	   *nodes;
	int			nnodes;
	bool		too_big;
} DlGraph;

/*
 * The node of "pid", added if new; NULL once the graph is full.
 */
static DlWait *
dl_node(DlGraph *g, int pid)
{
	int			i;

	for (i = 0; i < g->nnodes; i++)
		if (g->nodes[i].pid == pid)
			return &g->nodes[i];
	if (g->nnodes == DL_MAX_NODES)
	{
		g->too_big = true;
		return NULL;
	}
	memset(&g->nodes[g->nnodes], 0, sizeof(DlWait));
	g->nodes[g->nnodes].pid = pid;
	return &g->nodes[g->nnodes++];
}

static void
dl_add_blocker(DlWait *w, int pid, int *room)
{
	int			i;

	if (pid == 0 || pid == w->pid)
		return;
	for (i = 0; i < w->nblockers; i++)
		if (w->blockers[i] == pid)
			return;
	if (w->nblockers == *room)
	{
		*room = Max(*room * 2, 8);
		w->blockers = w->blockers ?
			repalloc(w->blockers, *room * sizeof(int)) :
			palloc(*room * sizeof(int));
	}
	w->blockers[w->nblockers++] = pid;
}

/*
 * Do holds in these modes of two sessions exclude each other?  Only two
 * shared holds of the plain kind do not.
 */
static bool
dl_modes_conflict(int kind1, int mode1, int kind2, int mode2)
{
	return !(kind1 == RLOCK_KIND_PLAIN && mode1 == RLOCK_MODE_SHARED &&
			 kind2 == RLOCK_KIND_PLAIN && mode2 == RLOCK_MODE_SHARED);
}

/*
 * Does "w->pid" wait for an rlock of the lock family (a request the worker
 * found busy)?  Then fill in w from the slots and the hold table.
 */
static bool
dl_rlock_wait(DlWait *w)
{
	int			i;
	int			hold = -1;
	uint32		generation = 0;
	int			kind = 0;
	int			mode = 0;
	uint64		owner_id = 0;
	uint64		seq = 0;
	char	   *key;
	int			keylen;
	int			prefixlen;
	int			room = 0;

	for (i = 0; i < rlock_shared->nslots && hold < 0; i++)
	{
		RlockSlot  *s = rlock_slot(i);

		SpinLockAcquire(&s->mutex);
		if (s->pid == w->pid &&
			(s->state == RLOCK_SLOT_PENDING || s->state == RLOCK_SLOT_TAKEN) &&
			s->args.op == RLOCK_OP_ACQUIRE && s->busy &&
			s->args.hold >= 0 && RLOCK_KIND_IN_FAMILY(s->args.kind))
		{
			hold = s->args.hold;
			generation = s->args.hold_generation;
			kind = s->args.kind;
			mode = s->args.mode;
			owner_id = s->args.owner_id;
			seq = s->seq;
		}
		SpinLockRelease(&s->mutex);
	}
	if (hold < 0)
		return false;
	key = rlock_hold_copy_key(hold, generation, &keylen, &prefixlen);
	if (key == NULL)
		return false;

	w->ident = seq;
	w->what = psprintf("%sLock on %srlock \"%s\"",
					   mode == RLOCK_MODE_SHARED ? "Share" : "Exclusive",
					   kind == RLOCK_KIND_FAIR ? "fair " : "",
					   rlock_sql_key(key, keylen, prefixlen));
	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold	h;
		char	   *other;
		int			otherlen;
		int			otherprefix;

		rlock_hold_read(i, &h);
		if (!h.in_use || h.keylen != keylen || h.owner_id == owner_id ||
			h.pid == w->pid || h.nsession + h.nxact == 0 || h.lost ||
			!RLOCK_KIND_IN_FAMILY(h.kind) ||
			!dl_modes_conflict(kind, mode, h.kind, h.mode))
			continue;
		other = rlock_hold_copy_key(i, h.generation, &otherlen, &otherprefix);
		if (other == NULL)
			continue;
		if (otherlen == keylen && memcmp(other, key, keylen) == 0)
			dl_add_blocker(w, h.pid, &room);
		pfree(other);
	}
	pfree(key);
	return true;
}

/*
 * The sessions of this instance whose holds keep "pid" waiting for an
 * rlock (rlock_blocking_pids()): how many, their pids in *pids
 * (palloc'd); 0 as well when pid waits for no rlock of the lock family.
 */
int
rlock_rlock_blockers(int pid, int **pids)
{
	DlWait		w;

	memset(&w, 0, sizeof(w));
	w.pid = pid;
	*pids = NULL;
	if (!dl_rlock_wait(&w))
		return 0;
	*pids = w.blockers;
	return w.nblockers;
}

/*
 * Does "w->pid" wait for a heavyweight lock?  Then fill in w.
 */
static void
dl_heavyweight_wait(DlWait *w)
{
	RlockPgWait pw;

	if (!rlock_pg_wait(w->pid, &pw))
		return;
	w->what = pw.what;
	w->ident = (uint64) pw.since;
	w->nblockers = pw.nblockers;
	w->blockers = pw.blockers;
}

/*
 * What "w->pid" waits for, looked up once per look.
 */
static void
dl_look_up(DlWait *w)
{
	if (w->known)
		return;
	w->known = true;
	if (!dl_rlock_wait(w))
		dl_heavyweight_wait(w);
}

/*
 * A path from w back to "start": true, with the nodes after w on it
 * pushed onto *path (the last first).
 */
static bool
dl_walk(DlGraph *g, DlWait *w, int start, List **path)
{
	int			i;

	check_stack_depth();
	dl_look_up(w);
	w->on_path = true;
	for (i = 0; i < w->nblockers; i++)
	{
		DlWait	   *next;

		if (w->blockers[i] == start)
		{
			w->on_path = false;
			return true;
		}
		next = dl_node(g, w->blockers[i]);
		if (next == NULL || next->on_path || next->done)
			continue;
		if (dl_walk(g, next, start, path))
		{
			*path = lcons(next, *path);
			w->on_path = false;
			return true;
		}
	}
	w->on_path = false;
	w->done = true;
	return false;
}

/*
 * One look for a cycle through this session's wait.  Returns its
 * signature (each process, and what it waits for since when) and fills
 * "detail" and "log" in PostgreSQL's words; NULL if there is none.
 */
static char *
dl_look(StringInfo detail, StringInfo log)
{
	DlGraph		g;
	DlWait	   *me;
	List	   *path = NIL;
	ListCell   *lc;
	StringInfoData sig;

	g.nodes = palloc(DL_MAX_NODES * sizeof(DlWait));
	g.nnodes = 0;
	g.too_big = false;
	me = dl_node(&g, MyProcPid);
	if (!dl_walk(&g, me, MyProcPid, &path))
		return NULL;
	path = lcons(me, path);

	initStringInfo(&sig);
	foreach(lc, path)
	{
		DlWait	   *w = (DlWait *) lfirst(lc);
		DlWait	   *next = (lnext(path, lc) != NULL) ?
			(DlWait *) lfirst(lnext(path, lc)) : me;

		appendStringInfo(&sig, "%d:" UINT64_FORMAT ":%s;", w->pid, w->ident,
						 w->what);
		if (foreach_current_index(lc) > 0)
			appendStringInfoChar(detail, '\n');
		appendStringInfo(detail,
						 "Process %d waits for %s; blocked by process %d.",
						 w->pid, w->what, next->pid);
	}
	appendStringInfoString(log, detail->data);
	foreach(lc, path)
	{
		DlWait	   *w = (DlWait *) lfirst(lc);

		appendStringInfo(log, "\nProcess %d: %s", w->pid,
						 pgstat_get_backend_current_activity(w->pid, false));
	}
	return sig.data;
}

/*
 * Look for a deadlock through this session's rlock wait, one look at a
 * time across the instance.  "noted" is the signature an earlier look
 * found (NULL if none): when this look finds the same cycle, this
 * session gives its request up and raises 40P01.  Returns the signature
 * found, to be confirmed at the next look (palloc'd in the caller's
 * context), or NULL.  Returns normally as well when the worker's answer
 * came first: the caller collects it.
 */
char *
rlock_deadlock_look(const char *noted)
{
	MemoryContext cxt;
	MemoryContext old;
	StringInfoData detail;
	StringInfoData log;
	char	   *found;
	char	   *result = NULL;
	bool		victim = false;

	cxt = AllocSetContextCreate(CurrentMemoryContext, "rlock deadlock look",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	initStringInfo(&detail);
	initStringInfo(&log);

	/* an error in between releases the lock as it aborts */
	LWLockAcquire(rlock_shared->deadlock_lock, LW_EXCLUSIVE);
	found = dl_look(&detail, &log);
	if (found != NULL && noted != NULL && strcmp(found, noted) == 0)
		victim = rlock_give_up_unanswered();
	LWLockRelease(rlock_shared->deadlock_lock);
	MemoryContextSwitchTo(old);

	if (victim)
	{
		pgstat_report_deadlock();
		ereport(ERROR,
				(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
				 errmsg("deadlock detected"),
				 errdetail_internal("%s", detail.data),
				 errdetail_log("%s", log.data),
				 errhint("See server log for query details.")));
	}
	if (found != NULL)
		result = pstrdup(found);
	MemoryContextDelete(cxt);
	return result;
}

/*
 * The worker found this session's wait on a cycle across instances
 * (worker/wfg.c), confirmed as ours are, and says so in "detail" (the
 * slot's: copied before the request is given up).  Unless its answer
 * came first, give the request up and raise 40P01.
 */
void
rlock_deadlock_told(const char *detail)
{
	char		copy[RLOCK_DETAIL_LEN];

	strlcpy(copy, detail, sizeof(copy));
	if (!rlock_give_up_unanswered())
		return;
	pgstat_report_deadlock();
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail_internal("%s", copy),
			 errhint("See server log for query details.")));
}
