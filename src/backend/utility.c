/*-------------------------------------------------------------------------
 *
 * utility.c
 *		DROP EXTENSION rlock while sessions hold locks: refused; whether
 *		a CALL or DO is running; the end of every statement.
 *
 * The library stays loaded (shared_preload_libraries) when the extension
 * is dropped, and so do the holds of running sessions: their locks would
 * stay in Redis, renewed, with no function left to release them early or
 * view to show them.  The drop is refused instead, as long as any session
 * of the instance holds an rlock lock.
 *
 * At the end of every statement (ExecutorEnd for queries, also those run
 * by functions and triggers; ProcessUtility for the others) the check
 * before commit is moved ahead of the pre-commit work of modules that
 * registered since (xact.c, rlock_xact_callback_first).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/utility.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "backend/backend.h"

static ProcessUtility_hook_type prev_process_utility = NULL;
static ExecutorEnd_hook_type prev_executor_end = NULL;

/* CALL and DO statements running in this session, nested or not */
static int	routines_running = 0;

/*
 * Locks held by sessions of the instance (transaction or session scope).
 */
static int
rlock_holds_held(void)
{
	int			n = 0;
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold	h;

		rlock_hold_read(i, &h);
		if (h.in_use && h.nsession + h.nxact > 0)
			n++;
	}
	return n;
}

static void
rlock_check_drop(DropStmt *stmt)
{
	ListCell   *lc;
	int			n;

	if (stmt->removeType != OBJECT_EXTENSION || rlock_shared == NULL)
		return;
	foreach(lc, stmt->objects)
	{
		if (strcmp(strVal(lfirst(lc)), "rlock") != 0)
			continue;
		n = rlock_holds_held();
		if (n > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot drop extension rlock while sessions hold rlock locks"),
					 errdetail_plural("%d lock is held in this instance.",
									  "%d locks are held in this instance.",
									  n, n),
					 errhint("rlock_locks lists them: release them, or end the sessions that hold them, first.")));
	}
}

static void
rlock_process_utility(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	bool		routine = IsA(pstmt->utilityStmt, CallStmt) ||
		IsA(pstmt->utilityStmt, DoStmt);

	if (IsA(pstmt->utilityStmt, DropStmt))
		rlock_check_drop((DropStmt *) pstmt->utilityStmt);
	if (routine)
		routines_running++;
	PG_TRY();
	{
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		if (routine)
			routines_running--;
	}
	PG_END_TRY();
	rlock_xact_callback_first();
}

static void
rlock_executor_end(QueryDesc *queryDesc)
{
	if (prev_executor_end)
		prev_executor_end(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
	rlock_xact_callback_first();
}

/*
 * Whether a CALL or DO statement is running: there, a transaction-scoped
 * lock lasts until the routine's COMMIT or its end, as it means to.
 */
bool
rlock_in_routine(void)
{
	return routines_running > 0;
}

/*
 * Install the hooks (from _PG_init, with the library preloaded).
 */
void
rlock_utility_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = rlock_process_utility;
	prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = rlock_executor_end;
}
