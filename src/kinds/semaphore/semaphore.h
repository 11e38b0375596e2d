/*-------------------------------------------------------------------------
 *
 * semaphore.h
 *		The semaphore kind's calls (kinds.h's call method), shared by its
 *		commands (semaphore.c) and its SQL functions (sql.c).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/semaphore/semaphore.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_SEMAPHORE_H
#define RLOCK_SEMAPHORE_H

/* call.lua's ARGV[1] */
#define SEMAPHORE_CALL_SET			1	/* set the permits if never set */
#define SEMAPHORE_CALL_ADD			2	/* add (or take away) permits */
#define SEMAPHORE_CALL_AVAILABLE	3	/* the available count */

/* the permits one session may hold on one semaphore (../permits.lua) */
#define SEMAPHORE_MAX_PERMITS		1024

#endif							/* RLOCK_SEMAPHORE_H */
