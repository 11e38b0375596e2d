/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The rlock background worker's entry point: all the rest of
 *		src/worker stays inside it.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_WORKER_H
#define RLOCK_WORKER_H

#include "fmgr.h"

extern PGDLLEXPORT void rlock_worker_main(Datum main_arg);

#endif							/* RLOCK_WORKER_H */
