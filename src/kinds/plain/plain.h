/*-------------------------------------------------------------------------
 *
 * plain.h
 *		The plain kind: Redisson's RLock, a reentrant exclusive lock.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/plain/plain.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_KIND_PLAIN_H
#define RLOCK_KIND_PLAIN_H

#include "kinds/kinds.h"

extern const RlockKindMethod rlock_kind_plain;

#endif							/* RLOCK_KIND_PLAIN_H */
