/*-------------------------------------------------------------------------
 *
 * compat.h
 *		The PostgreSQL majors rlock builds against, 15 to 18, and what
 *		differs between them.  Every test of PG_VERSION_NUM in the tree is
 *		in this file; the code elsewhere calls the names defined here.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_COMPAT_H
#define RLOCK_COMPAT_H

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000
#error "rlock needs PostgreSQL 15 or later: shmem_request_hook came in 15"
#endif
#if PG_VERSION_NUM >= 190000
#error "rlock is not yet tested against this PostgreSQL major (15 to 18 are)"
#endif

/*
 * The module's magic block.  PostgreSQL 18 also records the module's name
 * and version, which pg_get_loaded_modules() shows.  RLOCK_VERSION comes
 * from the Makefile, which reads it from rlock.control.
 */
#ifndef RLOCK_VERSION
#define RLOCK_VERSION "unknown"
#endif
#if PG_VERSION_NUM >= 180000
#define RLOCK_MODULE_MAGIC	PG_MODULE_MAGIC_EXT(.name = "rlock", .version = RLOCK_VERSION)
#else
#define RLOCK_MODULE_MAGIC	PG_MODULE_MAGIC
#endif

/*
 * This backend's index among the backends, from 0: the request slot it
 * owns.  PostgreSQL 17 numbers processes from 0 (MyProcNumber) where 15
 * and 16 numbered backends from 1 (MyBackendId); both stay below
 * MaxBackends for every process that can run SQL.
 */
static inline int
rlock_backend_index(void)
{
#if PG_VERSION_NUM >= 170000
	return MyProcNumber;
#else
	return MyBackendId - 1;
#endif
}

/* The local transaction id of this backend's current transaction */
static inline LocalTransactionId
rlock_local_xid(void)
{
#if PG_VERSION_NUM >= 170000
	return MyProc->vxid.lxid;
#else
	return MyProc->lxid;
#endif
}

/*
 * A wait event set that lives until it is freed, owned by no resource
 * owner.  PostgreSQL 17 allocates it in TopMemoryContext and takes a
 * resource owner instead of a memory context.
 */
static inline WaitEventSet *
rlock_wait_event_set(MemoryContext context, int nevents)
{
#if PG_VERSION_NUM >= 170000
	return CreateWaitEventSet(NULL, nevents);
#else
	return CreateWaitEventSet(context, nevents);
#endif
}

/*
 * The wait event rlock's processes show in pg_stat_activity.  From
 * PostgreSQL 17 on, extensions name their own (wait_event_type stays
 * 'Extension'); 15 and 16 show every extension's wait as 'Extension'.
 * *cache keeps the number the server gave for name.
 */
static inline uint32
rlock_wait_event(uint32 *cache, const char *name)
{
#if PG_VERSION_NUM >= 170000
	if (*cache == 0)
		*cache = WaitEventExtensionNew(name);
	return *cache;
#else
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * Memory for a GUC check hook's "extra", which the server frees: with
 * free() up to 15, with guc_free() (a pfree in the GUC memory context)
 * from 16 on.  NULL when out of memory.
 */
static inline void *
rlock_guc_malloc(size_t size)
{
#if PG_VERSION_NUM >= 160000
	return guc_malloc(LOG, size);
#else
	return malloc(size);
#endif
}

/*
 * The parameters of c.h's ExceptionalCondition, which the programs that
 * run rlock's code outside the server define (test/fuzz/shims.c): 16
 * dropped errorType.
 */
#if PG_VERSION_NUM >= 160000
#define RLOCK_EXCEPTIONAL_CONDITION_ARGS \
	const char *conditionName, const char *fileName, int lineNumber
#else
#define RLOCK_EXCEPTIONAL_CONDITION_ARGS \
	const char *conditionName, const char *errorType, \
	const char *fileName, int lineNumber
#endif

#endif							/* RLOCK_COMPAT_H */
