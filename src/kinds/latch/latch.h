/*-------------------------------------------------------------------------
 *
 * latch.h
 *		The latch kind's calls (kinds.h's call method), shared by its
 *		commands (latch.c) and its SQL functions (sql.c).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/latch/latch.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_LATCH_H
#define RLOCK_LATCH_H

/* call.lua's ARGV[1] */
#define LATCH_CALL_SET			1	/* set the count if not set */
#define LATCH_CALL_COUNT_DOWN	2	/* count down by one */
#define LATCH_CALL_COUNT		3	/* the count */
#define LATCH_CALL_DELETE		4	/* delete the latch */

/*
 * The largest count: 2^53 - 1, the largest integer from which every
 * smaller one is a double (Redis's Lua counts in doubles)
 */
#define LATCH_MAX_COUNT			INT64CONST(9007199254740991)

#endif							/* RLOCK_LATCH_H */
