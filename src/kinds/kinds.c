/*-------------------------------------------------------------------------
 *
 * kinds.c
 *		The table of lock kinds.
 *
 * Indexed by RlockKind, the number every request and hold entry carries.
 * A new kind adds its folder, a line here and its number in shared.h.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/kinds.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "kinds/kinds.h"
#include "kinds/plain/plain.h"

const RlockKindMethod *const rlock_kinds[RLOCK_NKINDS] = {
	&rlock_kind_plain			/* RLOCK_KIND_PLAIN */
};

/*
 * Register the scripts of every kind (the worker, before it connects).
 */
void
rlock_kinds_init(void)
{
	int			i;

	for (i = 0; i < RLOCK_NKINDS; i++)
		rlock_kinds[i]->init();
}
