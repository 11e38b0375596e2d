/*-------------------------------------------------------------------------
 *
 * vouch.c
 *		When what Redis last said of a hold may stand for asking again:
 *		the check before commit (backend/xact.c), the worker's answer to
 *		a check (worker/send.c) and its hand-off of a lock without
 *		waiting for Redis (worker/transfer.c) ask the same questions of
 *		the same shared state.
 *
 * First of the whole instance (rlock_vouching): the command connection
 * answered lately, and, under client-side tracking (worker/track.c),
 * tracking is armed and the worker has handled every announcement of a
 * change Redis made up to rlock.verify_window ago.  That is read before
 * the holds, which the worker changes before it moves track_fresh_at.
 * Then of each hold (rlock_hold_vouches): not lost, confirmed on the
 * current command connection, under the current tracking epoch, with a
 * lease that outlasts what the caller needs; for a commit
 * (rlock_hold_vouches_now) also with nothing queued or on the wire that
 * may change it.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/vouch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "rlock.h"
#include "shared/shared.h"

/*
 * The oldest announcement a vouching worker may have left unhandled, by
 * this process's rlock.verify_window; 0 (never fresh) when it is 0.
 */
TimestampTz
rlock_fresh_after(TimestampTz now)
{
	return rlock_verify_window > 0 ?
		now - (int64) rlock_verify_window * 1000 : 0;
}

/*
 * May holds be vouched for at "now"?  With "tracked", the worker must have
 * handled every announcement of a change Redis made up to "fresh_after"
 * (0: never so), and *track_epoch is the tracking epoch the holds must
 * have been confirmed under; else it is 0.  A connection that died
 * without a word (a host gone, a partition) looks open until a command
 * times out: it is trusted only while Redis answers on it, within a
 * second or rlock.command_timeout.
 */
bool
rlock_vouching(TimestampTz now, bool tracked, TimestampTz fresh_after,
			   uint32 *track_epoch)
{
	TimestampTz reply_at;

	*track_epoch = 0;
	if (tracked)
	{
		TimestampTz fresh_at;

		if (fresh_after == 0)
			return false;
		*track_epoch = pg_atomic_read_u32(&rlock_shared->track_epoch);
		fresh_at = (TimestampTz) pg_atomic_read_u64(&rlock_shared->track_fresh_at);
		pg_read_barrier();
		if (*track_epoch == 0 || fresh_at < fresh_after)
			return false;
	}
	reply_at = (TimestampTz) pg_atomic_read_u64(&rlock_shared->cmd_reply_at);
	return now - reply_at <= (int64) Min(rlock_command_timeout, 1000) * 1000;
}

/*
 * Does Redis's last word on the hold "h" (a copy) vouch for it until
 * "enough", under the tracking epoch rlock_vouching() gave?
 */
bool
rlock_hold_vouches(const RlockHold *h, uint32 track_epoch, TimestampTz enough)
{
	return !h->lost &&
		h->epoch == pg_atomic_read_u32(&rlock_shared->cmd_epoch) &&
		h->expires_at > enough &&
		(track_epoch == 0 || h->track_epoch == track_epoch);
}

/*
 * The same for a commit: and nothing queued or on the wire for the hold
 * may still change it (a release may shorten its lease; an acquire, or a
 * transfer handing it the lock, is not answered yet).
 */
bool
rlock_hold_vouches_now(const RlockHold *h, uint32 track_epoch,
					   TimestampTz enough)
{
	return !h->resync && !h->acquiring && !h->queued &&
		h->to_release == 0 && h->unacked == 0 && h->count > 0 &&
		rlock_hold_vouches(h, track_epoch, enough);
}
