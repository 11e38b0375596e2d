/*-------------------------------------------------------------------------
 *
 * shims.c
 *		What src/redis/reply.c needs of the server, for the fuzzing
 *		target: palloc and pfree as malloc and free, and the function a
 *		failed Assert calls.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/fuzz/shims.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>
#include <stdlib.h>

void *
MemoryContextAllocExtended(MemoryContext context, Size size, int flags)
{
	void	   *p = (flags & MCXT_ALLOC_ZERO) ? calloc(1, size) : malloc(size);

	if (p == NULL && !(flags & MCXT_ALLOC_NO_OOM))
		abort();
	return p;
}

void
pfree(void *pointer)
{
	free(pointer);
}

void
ExceptionalCondition(const char *conditionName, const char *errorType,
					 const char *fileName, int lineNumber)
{
	fprintf(stderr, "TRAP: %s(\"%s\", File: \"%s\", Line: %d)\n",
			errorType, conditionName, fileName, lineNumber);
	abort();
}
