/*-------------------------------------------------------------------------
 *
 * shims.c
 *		What src/redis/reply.c needs of the server, for the fuzzing
 *		target and the unit programs: memory contexts made of malloc and
 *		free, and the function a failed Assert calls.
 *
 * Every allocation is a malloc of its own, so that AddressSanitizer sees
 * each reply object and LeakSanitizer each one not freed.  A context
 * keeps its live allocations in a list, to free them when it is reset or
 * deleted, and counts their bytes as MemoryContextMemAllocated reports
 * them.  The block structure of AllocSet is not imitated: reply.c's
 * budget sees the bytes asked for plus a header each.
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

#include "utils/memutils.h"

#include "compat.h"

typedef struct ShimChunk
{
	struct ShimChunk *prev;
	struct ShimChunk *next;
	struct ShimContext *cxt;
	Size		size;			/* with this header */
} ShimChunk;

typedef struct ShimContext
{
	ShimChunk	chunks;			/* list head: prev and next only */
	Size		allocated;
} ShimContext;

#define SHIM_CONTEXT(c)	((ShimContext *) (c))

MemoryContext
AllocSetContextCreateInternal(MemoryContext parent, const char *name,
							  Size minContextSize, Size initBlockSize,
							  Size maxBlockSize)
{
	ShimContext *cxt = calloc(1, sizeof(ShimContext));

	if (cxt == NULL)
		abort();
	cxt->chunks.prev = cxt->chunks.next = &cxt->chunks;
	return (MemoryContext) cxt;
}

void *
MemoryContextAllocExtended(MemoryContext context, Size size, int flags)
{
	ShimContext *cxt = SHIM_CONTEXT(context);
	ShimChunk  *chunk = malloc(sizeof(ShimChunk) + size);

	if (chunk == NULL)
	{
		if (!(flags & MCXT_ALLOC_NO_OOM))
			abort();
		return NULL;
	}
	if (flags & MCXT_ALLOC_ZERO)
		memset(chunk + 1, 0, size);
	chunk->cxt = cxt;
	chunk->size = sizeof(ShimChunk) + size;
	chunk->next = cxt->chunks.next;
	chunk->prev = &cxt->chunks;
	chunk->next->prev = chunk;
	cxt->chunks.next = chunk;
	cxt->allocated += chunk->size;
	return chunk + 1;
}

void
pfree(void *pointer)
{
	ShimChunk  *chunk = ((ShimChunk *) pointer) - 1;

	chunk->prev->next = chunk->next;
	chunk->next->prev = chunk->prev;
	chunk->cxt->allocated -= chunk->size;
	free(chunk);
}

void
MemoryContextReset(MemoryContext context)
{
	ShimContext *cxt = SHIM_CONTEXT(context);

	while (cxt->chunks.next != &cxt->chunks)
		pfree(cxt->chunks.next + 1);
}

void
MemoryContextDelete(MemoryContext context)
{
	MemoryContextReset(context);
	free(context);
}

Size
MemoryContextMemAllocated(MemoryContext context, bool recurse)
{
	return SHIM_CONTEXT(context)->allocated;
}

void
ExceptionalCondition(RLOCK_EXCEPTIONAL_CONDITION_ARGS)
{
	fprintf(stderr, "TRAP: failed Assert(\"%s\"), File: \"%s\", Line: %d\n",
			conditionName, fileName, lineNumber);
	abort();
}
