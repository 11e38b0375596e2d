/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Counters and latency histograms shared by backends and the worker,
 *		and the worker's published status.
 *
 * Counters are atomics that any process adds to without a lock; a reader
 * sees each one exact, though not all of them at one instant.  A latency
 * histogram keeps a count, a sum and a maximum next to its buckets, whose
 * upper bounds (in microseconds) grow roughly by 2.5 from 50 us to 10 s;
 * the last bucket has no bound.
 *
 * The worker's status (connection states, Redis version and role, the
 * last error) is larger than an atomic.  The worker alone writes it,
 * inside rlock_status_begin_write() and rlock_status_end_write(), which
 * make its change count odd while it writes; a reader copies the struct
 * and tries again if the count was odd or moved (the scheme PostgreSQL
 * uses for backend status entries).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "shared/shared.h"

const int64 rlock_latency_bounds[RLOCK_LATENCY_BUCKETS - 1] = {
	50, 100, 250, 500,
	1000, 2500, 5000, 10000, 25000, 50000,
	100000, 250000, 500000,
	1000000, 2500000, 5000000, 10000000
};

/*
 * Set every counter and histogram to zero: "init" at shared memory
 * creation, else a reset (rlock_stats_reset()).
 */
static void
rlock_stats_zero(bool init)
{
	RlockStats *st = &rlock_shared->stats;
	pg_atomic_uint64 *all[RLOCK_NCOUNTERS +
						  RLOCK_NLATENCIES * (3 + RLOCK_LATENCY_BUCKETS)];
	int			n = 0;
	int			i;
	int			j;

	for (i = 0; i < RLOCK_NCOUNTERS; i++)
		all[n++] = &st->counters[i];
	for (i = 0; i < RLOCK_NLATENCIES; i++)
	{
		RlockHistogram *hist = &st->latency[i];

		all[n++] = &hist->count;
		all[n++] = &hist->sum_us;
		all[n++] = &hist->max_us;
		for (j = 0; j < RLOCK_LATENCY_BUCKETS; j++)
			all[n++] = &hist->buckets[j];
	}
	for (i = 0; i < n; i++)
	{
		if (init)
			pg_atomic_init_u64(all[i], 0);
		else
			pg_atomic_write_u64(all[i], 0);
	}
	if (init)
		pg_atomic_init_u64(&st->reset_at, (uint64) GetCurrentTimestamp());
	else
		pg_atomic_write_u64(&st->reset_at, (uint64) GetCurrentTimestamp());
}

void
rlock_stats_init(void)
{
	rlock_stats_zero(true);
}

void
rlock_stats_reset(void)
{
	rlock_stats_zero(false);
}

void
rlock_count(RlockCounter counter, uint64 n)
{
	pg_atomic_fetch_add_u64(&rlock_shared->stats.counters[counter], n);
}

/*
 * Record one latency, in microseconds.
 */
void
rlock_latency(RlockLatency latency, int64 us)
{
	RlockHistogram *hist = &rlock_shared->stats.latency[latency];
	uint64		max;
	int			bucket = 0;

	if (us < 0)
		us = 0;
	while (bucket < RLOCK_LATENCY_BUCKETS - 1 &&
		   us > rlock_latency_bounds[bucket])
		bucket++;

	pg_atomic_fetch_add_u64(&hist->buckets[bucket], 1);
	pg_atomic_fetch_add_u64(&hist->sum_us, (uint64) us);
	pg_atomic_fetch_add_u64(&hist->count, 1);

	max = pg_atomic_read_u64(&hist->max_us);
	while ((uint64) us > max)
	{
		/* on failure, max is reloaded with the value that won */
		if (pg_atomic_compare_exchange_u64(&hist->max_us, &max, (uint64) us))
			break;
	}
}

void
rlock_status_begin_write(void)
{
	pg_atomic_fetch_add_u32(&rlock_shared->status.changecount, 1);
	pg_write_barrier();
}

void
rlock_status_end_write(void)
{
	pg_write_barrier();
	pg_atomic_fetch_add_u32(&rlock_shared->status.changecount, 1);
}

/*
 * Copy the worker's status, consistently.
 */
void
rlock_status_read(RlockWorkerStatus *copy)
{
	RlockWorkerStatus *status = &rlock_shared->status;

	for (;;)
	{
		uint32		before;
		uint32		after;

		before = pg_atomic_read_u32(&status->changecount);
		pg_read_barrier();
		memcpy(copy, status, sizeof(RlockWorkerStatus));
		pg_read_barrier();
		after = pg_atomic_read_u32(&status->changecount);
		if (before == after && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
		pg_spin_delay();
	}
}
