/*-------------------------------------------------------------------------
 *
 * transfer.c
 *		A lock this instance frees handed straight to its next local
 *		waiter, in one command, with the waiter answered as soon as that
 *		command is written instead of when Redis replies.
 *
 * On a hot key the release of a holder A and the try of the next local
 * waiter B already leave in one write (releases.c, waiters.c), but B is
 * answered only after Redis replied: a round trip on the lock's critical
 * path.  Where the kind has a transfer command (kinds.h), the release
 * that frees A's hold instead names B: Redis removes A's hold and gives B
 * one in the same script, so the key is never free, no other client can
 * take it between the two, and no unlock message goes out.  B is granted
 * at once; its transaction runs while the transfer is on the wire.
 *
 * That is safe because B's grant is not the last word:
 *
 * - Only a waiter whose commit checks its hold is handed the lock so
 *   (transaction-scoped, the check before commit not off, no fencing
 *   token asked for, which only Redis can count), and its hold stays
 *   "acquiring" until the transfer's reply.  Its commit cannot be
 *   vouched for before (backend/xact.c): it asks, and the worker answers
 *   once the reply is in, without a round trip if tracking vouches for
 *   the hold by then (send.c).  Its releases wait for the reply too
 *   (holdtable.c does not send a count while an acquire is on the wire).
 * - A transfer that finds A's hold gone wrote nothing: B's hold is marked
 *   lost, and B's commit fails with 40001, as if the lock had been
 *   removed right after a grant.  A transfer whose reply is lost, or that
 *   Redis refused, leaves B's hold lost as well; A's count is restated.
 *   One refused for NOSCRIPT ran nothing and is sent again once the
 *   scripts are loaded (transfer_again).  A commit whose check was
 *   turned off after the grant still waits for the reply (backend/
 *   xact.c).
 * - It is tried only when a commit would trust A's hold without asking:
 *   tracking armed and fresh, A's key tracked and unchanged since Redis
 *   confirmed it, A's lease beyond rlock.verify_margin (shared/vouch.c).
 *   So a transfer that finds A's hold gone takes a change that came in
 *   the last fraction of a millisecond, the same window the check before
 *   commit leaves.
 * - Never in a Redis Cluster, nor where replicas must confirm grants: a
 *   grant there is not the holder's until they have.
 *
 * The line's run counts transfers as hand-offs: after rlock.handoff_limit
 * of them in a row while other clients listen (the transfer counts the
 * channel's subscribers), the next release frees the lock for everyone
 * and publishes the unlock message, as without transfers (waiters.c).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/transfer.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "rlock.h"
#include "worker/worker_int.h"

/*
 * Would a commit trust the hold "index", being released, without asking
 * Redis?  And may a lock on its key be handed on without replicas?
 */
static bool
transfer_vouched(int index)
{
	TimestampTz now = GetCurrentTimestamp();
	RlockHold	copy;
	uint32		track_epoch;
	int			ask;

	if (rlock_redis_cluster() ||
		rlock_redis_sync_need(worker_hold_sync_conn(index), &ask) > 0 ||
		!rlock_vouching(now, true, rlock_fresh_after(now), &track_epoch))
		return false;
	rlock_hold_read(index, &copy);
	return rlock_hold_vouches(&copy, track_epoch,
							  TimestampTzPlusMilliseconds(now,
														  rlock_verify_margin));
}

/*
 * Is the entry "index" its owner's only entry of its key and kind?  A
 * transfer writes the key anew for the taker: the giver's holds of the
 * key in another mode (a shared hold beside the exclusive one) would go.
 */
static bool
transfer_giver_alone(int index)
{
	RlockHold  *h = rlock_hold(index);
	const int  *holds;
	int			n = rlock_owners_holds(h->owner_id, &holds);
	int			i;

	for (i = 0; i < n; i++)
	{
		RlockHold	copy;

		if (holds[i] == index)
			continue;
		rlock_hold_read(holds[i], &copy);
		/* the key is constant while the entry is in use */
		if (copy.in_use && copy.owner_id == h->owner_id &&
			copy.kind == h->kind && copy.keylen == h->keylen &&
			memcmp(rlock_hold(holds[i])->key, h->key, h->keylen) == 0)
			return false;
	}
	return true;
}

/*
 * May the waiting request "req" be granted a lock at write: its commit
 * checks it, it wants no token, and its entry holds nothing and has
 * nothing on its way.
 */
static bool
transfer_takes(WorkerReq *req, const RlockHold *from)
{
	RlockHold	copy;

	if (!req->args.checked || req->args.want_token ||
		req->args.mode != RLOCK_MODE_EXCLUSIVE ||
		from->mode != RLOCK_MODE_EXCLUSIVE ||
		(req->args.wait_until != 0 &&
		 GetCurrentTimestamp() >= req->args.wait_until))
		return false;
	rlock_hold_read(req->args.hold, &copy);
	return copy.in_use && copy.count == 0 && !copy.lost &&
		!copy.acquiring && !copy.queued && !copy.resync &&
		copy.unacked == 0 && copy.to_release == 0;
}

/*
 * A transfer of the lock of the entry "from_index" to the entry "hold",
 * which is to hold "target" for "lease_ms" after it: the command, ready
 * to be sent on "conn".
 */
static WorkerCmd *
transfer_cmd(RlockConn *conn, int from_index, int hold, int32 target,
			 int64 lease_ms, RlockArgs **args)
{
	RlockHold  *h = rlock_hold(from_index);
	const RlockKindMethod *kind = rlock_kinds[h->kind];
	RlockKindHold from;
	RlockKindHold to;
	WorkerCmd  *wc;

	from.key = h->key;
	from.keylen = h->keylen;
	from.owner_id = h->owner_id;
	from.mode = h->mode;
	from.waited = false;
	from.queue_ms = 0;
	from.held = 0;
	to = from;
	to.owner_id = rlock_hold(hold)->owner_id;
	to.held = (target - rlock_hold(hold)->adding) * kind->step;

	wc = worker_cmd_new(WORKER_CMD_TRANSFER);
	wc->from_hold = from_index;
	wc->hold = hold;
	wc->target = target;
	wc->lease_ms = lease_ms;
	*args = worker_args();
	kind->transfer(*args, &wc->cmd, &from, &to, target * kind->step,
				   lease_ms);
	rlock_track_mark_acquire(conn, wc, *args, false);
	return wc;
}

/*
 * The release of the entry "index" (already counted as on its way by
 * rlock_hold_dequeue) frees its lock: send it as a transfer to the next
 * local waiter, if one may take it so, and grant that waiter now.  False
 * if the release is to be sent as usual.  True also when the connection
 * could not take the transfer: the count is then restated later, and the
 * waiter goes on waiting.
 */
bool
worker_send_transfer(int index)
{
	RlockHold  *h = rlock_hold(index);
	const RlockKindMethod *kind = rlock_kinds[h->kind];
	RlockConn  *conn = worker_hold_conn(index);
	WorkerReq  *req;
	WorkerCmd  *wc;
	RlockArgs  *args;
	int			slot;

	/* a waiter first: most releases have none, and that costs no clock */
	if (kind->transfer == NULL || kind->hand_off(0) != 1)
		return false;
	slot = rlock_waiters_next(h->kind, h->key, h->keylen);
	if (slot < 0)
		return false;
	req = worker_req(slot);
	if (!transfer_takes(req, h) || !transfer_vouched(index) ||
		!transfer_giver_alone(index))
		return false;

	wc = transfer_cmd(conn, index, req->args.hold,
					  rlock_hold_acquire_begin(req->args.hold,
											   req->args.amount),
					  worker_lease(req->args.lease_ms), &args);
	wc->slot = slot;
	wc->seq = req->seq;
	if (!worker_cmd_send(conn, wc, args))
	{
		(void) rlock_hold_refuse(req->args.hold, false, false);
		rlock_hold_release_unsent(index);
		return true;
	}
	worker_release_handing(h->key, h->keylen, 1);

	/* granted now, confirmed by the reply (the entry stays acquiring) */
	(void) rlock_hold_grant(req->args.hold, wc->target,
							TimestampTzPlusMilliseconds(wc->cmd.sent_at,
														wc->lease_ms),
							true, false);
	req->woken = false;
	worker_grant(wc, req, 0);
	return true;
}

/*
 * Redis had lost the transfer script (SCRIPT FLUSH): it ran nothing, and
 * the waiter was granted already.  Send the transfer again once the
 * scripts are loaded, as a refused acquire or release is sent again,
 * rather than fail the waiter's commit for a lock nobody took.  The
 * grant's lease still counts from the first sending.  False if it cannot
 * go now (a server that forgot the scripts again within a second).
 */
static bool
transfer_again(RlockConn *conn, WorkerCmd *old, const RlockReply *reply)
{
	WorkerCmd  *wc;
	RlockArgs  *args;

	if (reply == NULL || reply->type != RLOCK_REPLY_ERROR ||
		rlock_reply_classify(reply) != RLOCK_REPLY_NOSCRIPT ||
		!rlock_scripts_reload(conn, &old->cmd))
		return false;
	wc = transfer_cmd(conn, old->from_hold, old->hold, old->target,
					  old->lease_ms, &args);
	wc->slot = old->slot;
	wc->seq = old->seq;
	if (!worker_cmd_send(conn, wc, args))
		return false;
	rlock_track_answered(conn, old, false);
	return true;
}

/*
 * The reply to a transfer: the giver's release is answered as a release
 * would be; the taker's grant stands, or its hold is lost.  When the lock
 * did not change hands it may be free: a waiter of the line tries.
 */
void
worker_transfer_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	RlockHold  *h = rlock_hold(wc->from_hold);
	bool		moved = false;
	int			heard = -1;

	if (transfer_again(conn, wc, reply))
		return;
	if (reply != NULL && reply->type != RLOCK_REPLY_ERROR &&
		!rlock_kinds[h->kind]->transfer_result(reply, &moved, &heard))
	{
		moved = false;
		worker_unknown_status(conn, wc, h->kind);
		reply = NULL;			/* as good as lost */
	}
	worker_release_handing(h->key, h->keylen, -1);

	if (moved)
	{
		rlock_hold_settle(wc->hold, wc->target, true);
		rlock_waiters_transferred(h->kind, h->key, h->keylen, heard);
	}
	else
	{
		if (rlock_hold_refuse(wc->hold, false, true))
			rlock_count(RLOCK_STAT_LOST, 1);
		rlock_waiters_pass_on(h->kind, h->key, h->keylen, false);
	}
	rlock_track_answered(conn, wc, moved);
	worker_requeue_hold(wc->hold);
	rlock_hold_try_free(wc->hold);

	worker_release_answered(conn, &wc->cmd, wc->from_hold, reply,
							reply != NULL && reply->type != RLOCK_REPLY_ERROR &&
							!moved, 0, 0);
}
