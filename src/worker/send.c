/*-------------------------------------------------------------------------
 *
 * send.c
 *		Sending requests: the command each request sends, when it may go,
 *		and trying again.
 *
 * A request goes out once its connection is ready and nothing ahead of
 * it on its entry is unanswered: a request waits while an acquire is on
 * the wire for its entry (or, for a BARRIER or VERIFY, for any entry of
 * its owner), as that reply may put releases ahead of it.  An ACQUIRE
 * sends its kind's acquire script (on the sync connection when replicas
 * must confirm it, sync.c), unless it joins the line of local waiters
 * without trying; VERIFY sends the kind's verify script over its owner's
 * entries in batches (entries.c); the rest send one command each.
 *
 * A waiting acquire woken by an unlock message, a confirmed subscription
 * or a hand-off tries again at once; one told to retry at once again and
 * again (a lease that is always just ending, a flood of unlock messages)
 * is slowed down after RLOCK_QUICK_RETRIES such retries, with a gap
 * doubling from 1 ms up to RLOCK_RETRY_GAP_MAX_MS between tries, so that a
 * broken or hostile server cannot make the worker spin.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/send.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "worker/worker_int.h"

/* Retries without a wait allowed in a row; after them, a growing gap */
#define RLOCK_QUICK_RETRIES		4
#define RLOCK_RETRY_GAP_MAX_MS	100

/*
 * The connection a request's commands go on: its key's, or its entry's
 * key's; for one with neither (BARRIER, VERIFY), any command connection.
 */
RlockConn *
worker_req_conn(WorkerReq *req)
{
	if (req->key != NULL)
		return rlock_redis_route(req->key, req->args.keylen);
	if (req->set != NULL)
		return worker_hold_conn(req->set[0]);
	if (req->args.hold >= 0)
		return worker_hold_conn(req->args.hold);
	return rlock_redis_command_conn();
}

/*
 * Does a VERIFY check this entry: its owner's, holding something?
 */
static bool
worker_verify_checks(WorkerReq *req, int index)
{
	uint32		generation;

	return worker_hold_owned(index, req->args.owner_id, true, &generation);
}

/*
 * Can the request be sent now: is its connection ready?  A VERIFY needs
 * the connections of the entries it checks.
 */
bool
worker_req_ready(WorkerReq *req)
{
	const int  *holds;
	int			n;
	int			i;

	if (req->args.op != RLOCK_OP_VERIFY || !rlock_redis_cluster())
		return rlock_conn_ready(worker_req_conn(req));
	n = rlock_owners_holds(req->args.owner_id, &holds);
	for (i = 0; i < n; i++)
	{
		if (worker_verify_checks(req, holds[i]) &&
			!rlock_conn_ready(worker_hold_conn(holds[i])))
			return false;
	}
	return rlock_conn_ready(rlock_redis_command_conn());
}

/*
 * The connection a request waits for, for messages: for a VERIFY, the
 * first of its owner's entries that is not ready.
 */
RlockConn *
worker_req_missing_conn(WorkerReq *req)
{
	const int  *holds;
	int			n;
	int			i;

	if (req->args.op == RLOCK_OP_VERIFY && rlock_redis_cluster())
	{
		n = rlock_owners_holds(req->args.owner_id, &holds);
		for (i = 0; i < n; i++)
		{
			if (worker_verify_checks(req, holds[i]) &&
				!rlock_conn_ready(worker_hold_conn(holds[i])))
				return worker_hold_conn(holds[i]);
		}
	}
	return worker_req_conn(req);
}

/*
 * Is an acquire for the entry on the wire, or, with "releases_too", also
 * anything queued on it or sent for it and not answered yet?
 */
static bool
worker_hold_unsettled(int index, bool releases_too)
{
	RlockHold	copy;

	if (!releases_too)
		return worker_hold_acquiring(index);
	rlock_hold_read(index, &copy);
	return copy.acquiring || copy.queued || copy.resync || copy.unacked > 0 ||
		copy.to_release > 0;
}

/*
 * Must an acquire for the entry wait?  While an earlier one is on the
 * wire, always.  When acquisitions are synced they go on a connection of
 * their own, which orders nothing against the command connection: they
 * also wait until every release and restatement of the entry was
 * answered, lest one that Redis runs later undo the grant.  And they wait
 * for the sync connection.  In a Redis Cluster too: a release on the wire
 * to a node that answers MOVED is sent again to the new primary, after an
 * acquire sent there directly once the map had changed.
 */
static bool
worker_acquire_held_back(WorkerReq *req)
{
	int			index = req->args.hold;
	RlockHold  *h = rlock_hold(index);
	RlockConn  *sync = worker_hold_sync_conn(index);
	int			ask;

	if (rlock_redis_sync_need(sync, &ask) > 0)
	{
		if (worker_sync_blocked(sync))
			return true;

		/*
		 * Handed the lock by a release of this instance: that release
		 * went on the command connection, which orders nothing against
		 * this one, so the try waits for its answer rather than overtake
		 * it, find the lock still held and sleep.
		 */
		if (req->handed && worker_release_inflight(h->key, h->keylen))
			return true;
		return worker_hold_unsettled(index, true);
	}
	return worker_hold_unsettled(index, rlock_redis_cluster());
}

/*
 * Must an ACQUIRE_SET wait?  As an acquire of each of its entries would:
 * its keys share their connections.
 */
static bool
worker_set_held_back(WorkerReq *req)
{
	RlockConn  *sync = worker_req_sync_conn(req);
	int			ask;
	bool		synced = rlock_redis_sync_need(sync, &ask) > 0;
	int			i;

	if (synced && worker_sync_blocked(sync))
		return true;
	for (i = 0; i < req->args.nset; i++)
	{
		if (worker_hold_unsettled(req->set[2 * i],
								  synced || rlock_redis_cluster()))
			return true;
	}
	return false;
}

/*
 * Is some release covered by a RELEASE, BARRIER or VERIFY request not
 * answered yet?  RELEASE covers its entry, the others every entry of
 * their owner.  With "acquiring", only entries with an acquire on the wire
 * count (such requests are not sent before the releases queued behind
 * those acquires are).
 */
bool
worker_owner_busy(WorkerReq *req, bool acquiring)
{
	const int  *holds;
	int			n;
	int			i;

	if (req->args.op == RLOCK_OP_RELEASE)
		return acquiring ? worker_hold_acquiring(req->args.hold) :
			!worker_hold_settled(req->args.hold);

	n = rlock_owners_holds(req->args.owner_id, &holds);
	for (i = 0; i < n; i++)
	{
		uint32		generation;

		if (!worker_hold_owned(holds[i], req->args.owner_id, false,
							   &generation))
			continue;
		if (acquiring ? worker_hold_acquiring(holds[i]) :
			!worker_hold_settled(holds[i]))
			return true;
	}
	return false;
}

/*
 * A RELEASE request whose release Redis refused: it fails now with what
 * Redis said, rather than waiting for a release that is sent again only
 * later, maybe much later (the hold stays queued, and its release goes on
 * being sent).  True if it was so answered.
 */
bool
worker_release_refused_now(WorkerReq *req)
{
	const char *error;

	if (req->args.op != RLOCK_OP_RELEASE ||
		!worker_release_refused(req->args.hold, &error))
		return false;
	worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0, error);
	return true;
}


/*
 * A first acquire that may wait, for a lock that requests of this
 * instance already wait for, joins their line without trying: the lock
 * is held, and a hand-off or an unlock message will let it try in turn.
 * Its timer is the lease end the line's latest busy answer gave (at most
 * rlock.watchdog_timeout away) or its own deadline, so that a missed
 * wake-up costs time, not a hang; at its deadline it tries once before it
 * gives up.  It listens where the holder that answer named publishes,
 * as the line's members that got it do (waiters.c).
 */
static bool
worker_join_line(WorkerReq *req)
{
	RlockHold  *h = rlock_hold(req->args.hold);
	TimestampTz busy_until;
	TimestampTz now;
	TimestampTz retry_at;
	int			blocker;

	/*
	 * Waiters of a kind that queues in Redis form no line here, nor do
	 * those of a kind whose releases hand nothing to a line (a semaphore:
	 * a waiter for fewer permits than the one ahead of it may get them
	 * now, and every waiter tries when told)
	 */
	if (rlock_kinds[h->kind]->waiter_channel != NULL ||
		rlock_kinds[h->kind]->hand_off(0) == 0)
		return false;

	/*
	 * Nor does an upgrade: the line may wait for its own shared hold, and
	 * it alone may be let in while that hold is the last
	 */
	if (req->args.upgrade)
		return false;
	busy_until = rlock_waiters_line(h->kind, h->key, h->keylen, &blocker);
	now = GetCurrentTimestamp();
	if (busy_until <= now)
		return false;			/* no line, or the lease may be over */
	if (req->args.wait_until != 0 && now >= req->args.wait_until)
		return false;			/* may not wait: it tries */

	req->tried = true;
	req->line_only = true;
	req->told_busy = true;
	rlock_waiters_join(worker_slot_of(req), h->kind, h->key, h->keylen);
	rlock_waiters_blocked(worker_slot_of(req), h->kind, h->key, h->keylen,
						  blocker);
	worker_set_state(req, REQ_WAITING);
	worker_mark_busy(req);
	retry_at = Min(busy_until,
				   TimestampTzPlusMilliseconds(now, rlock_watchdog_timeout));
	if (req->args.wait_until != 0)
		retry_at = Min(retry_at, req->args.wait_until);
	worker_timer_set(req, retry_at);
	return true;
}

static void
worker_send_acquire(WorkerReq *req)
{
	int			slot = worker_slot_of(req);
	RlockHold  *h = rlock_hold(req->args.hold);
	RlockKindHold kh;
	RlockArgs  *args;
	WorkerCmd  *wc;
	int32		target;
	int			ask;
	RlockConn  *sync = worker_hold_sync_conn(req->args.hold);
	int			need = rlock_redis_sync_need(sync, &ask);
	RlockConn  *conn = need > 0 ? sync : worker_hold_conn(req->args.hold);

	/* only the worker changes count: no need to read it under the mutex */
	if (h->count == 0 && !req->tried && worker_join_line(req))
		return;

	target = rlock_hold_acquire_begin(req->args.hold, req->args.amount);
	kh.owner_id = h->owner_id;
	kh.key = h->key;
	kh.keylen = h->keylen;
	kh.mode = h->mode;
	kh.held = (target - req->args.amount) * rlock_kinds[h->kind]->step;
	/* a waiter leaves a lock yielded to other clients to them */
	kh.waited = req->told_busy;
	/*
	 * One that may wait queues, where its kind has a queue, for the wait
	 * it has left when it first tries (-1: without limit); its give-up
	 * names the same
	 */
	kh.queue_ms = 0;
	if (rlock_kinds[h->kind]->give_up != NULL)
	{
		if (!req->queued)
		{
			TimestampTz now = GetCurrentTimestamp();

			req->queue_ms = req->args.wait_until == 0 ? -1 :
				Max((req->args.wait_until - now) / 1000, 0);
			req->queued = (req->queue_ms != 0);
		}
		kh.queue_ms = req->queue_ms;
	}

	/*
	 * A give-up kept for a connection that was down goes out before any
	 * try of its kind that may queue: a route of its key that became ready
	 * without a new connection (a slot moved to a primary already
	 * connected, replicas no longer confirming) would otherwise let it run
	 * after a later wait of its owner queued again, and take that entry
	 * out of the queue while its owner waits.
	 */
	if (rlock_kinds[h->kind]->give_up != NULL)
		worker_give_ups_flush();

	wc = worker_cmd_new(WORKER_CMD_ACQUIRE);
	wc->slot = slot;
	wc->seq = req->seq;
	wc->hold = req->args.hold;
	wc->target = target;
	wc->lease_ms = worker_lease(req->args.lease_ms);
	wc->want_token = req->args.want_token;
	if (need > 0)
		worker_sync_join(sync, need, ask, wc);
	args = worker_args();
	rlock_kinds[h->kind]->acquire(args, &wc->cmd, &kh,
								  target * rlock_kinds[h->kind]->step,
								  wc->lease_ms, req->args.want_token);
	rlock_track_mark_acquire(conn, wc, args, need > 0);
	req->wakes_seen = rlock_waiters_wakes(slot);
	req->releases_seen = worker_releases_sent();
	req->woken = false;
	req->tried = true;
	req->line_only = false;
	req->last_try_at = GetCurrentTimestamp();
	worker_set_state(req, REQ_INFLIGHT);
	if (!worker_cmd_send(conn, wc, args))
	{
		(void) rlock_hold_refuse(req->args.hold, false, false);
		worker_make_pending(req);
	}
}

/*
 * May an ACQUIRE_SET go as one command?  Its kind must have one, its keys
 * must share a slot in a Redis Cluster (and so their connections), and
 * the owner must hold none of them: each entry's count 0, in the kind's
 * first mode.  "holds" receives what the command names.
 */
static bool
worker_set_eligible(WorkerReq *req, RlockKindHold *holds)
{
	int			first_slot = -1;
	int			i;

	if (rlock_kinds[req->args.kind]->acquire_set == NULL)
		return false;
	for (i = 0; i < req->args.nset; i++)
	{
		int			index = req->set[2 * i];
		RlockHold  *h = rlock_hold(index);

		/* only the worker changes count: no need to read it under the mutex */
		if (h->count != 0 || h->kind != req->args.kind || h->mode != 0 ||
			h->owner_id != req->args.owner_id)
			return false;
		if (rlock_redis_cluster())
		{
			int			slot = rlock_key_slot(h->key, h->keylen);

			if (first_slot >= 0 && slot != first_slot)
				return false;
			first_slot = slot;
		}
		memset(&holds[i], 0, sizeof(RlockKindHold));
		holds[i].key = h->key;
		holds[i].keylen = h->keylen;
		holds[i].owner_id = h->owner_id;
		holds[i].mode = h->mode;
	}
	return true;
}

/*
 * Send an ACQUIRE_SET: the kind's acquire_set over its entries, each
 * asking for one hold, on the sync connection with a WAIT behind it when
 * replicas must confirm it, as an acquire goes; or an answer that sends
 * the backend the long way (RLOCK_STATUS_DECLINED).  Never a fencing token
 * nor a tracking mark: a commit asks Redis about these holds, which the
 * worker cannot vouch for.
 */
static void
worker_send_acquire_set(WorkerReq *req)
{
	RlockKindHold holds[RLOCK_SET_MAX_KEYS];
	RlockArgs  *args;
	WorkerCmd  *wc;
	RlockConn  *sync = worker_req_sync_conn(req);
	int			ask;
	int			need = rlock_redis_sync_need(sync, &ask);
	RlockConn  *conn = need > 0 ? sync : worker_req_conn(req);
	int			n = req->args.nset;
	int			i;

	if (!worker_set_eligible(req, holds))
	{
		worker_complete(req, RLOCK_STATUS_DECLINED, 0, NULL);
		return;
	}
	wc = worker_cmd_new(WORKER_CMD_ACQUIRE_SET);
	wc->slot = worker_slot_of(req);
	wc->seq = req->seq;
	wc->lease_ms = worker_lease(req->args.lease_ms);
	wc->nholds = n;
	wc->holds = MemoryContextAlloc(rlock_worker_context,
								   n * 2 * sizeof(int));
	memcpy(wc->holds, req->set, n * 2 * sizeof(int));
	for (i = 0; i < n; i++)
	{
		int32		target PG_USED_FOR_ASSERTS_ONLY;

		target = rlock_hold_acquire_begin(req->set[2 * i], 1);
		Assert(target == 1);
	}
	if (need > 0)
		worker_sync_join(sync, need, ask, wc);
	args = worker_args();
	rlock_kinds[req->args.kind]->acquire_set(args, &wc->cmd, holds, n,
											 wc->lease_ms);
	req->tried = true;
	req->last_try_at = GetCurrentTimestamp();
	worker_set_state(req, REQ_INFLIGHT);
	if (!worker_cmd_send(conn, wc, args))
	{
		for (i = 0; i < n; i++)
			(void) rlock_hold_refuse(req->set[2 * i], false, false);
		worker_make_pending(req);
	}
}

/*
 * Would a commit now trust every hold of the VERIFY's owner without
 * asking (shared/vouch.c), by its backend's rlock.verify_at_commit and
 * rlock.verify_window (args.fresh_after)?  Its backend asked because
 * something was still on the wire for one of them, most often a transfer
 * handing it the lock (transfer.c), or because a grant's mark had not
 * come yet; a VERIFY is sent only once no acquire of the owner is on the
 * wire.
 */
static bool
worker_verify_vouched(WorkerReq *req)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz enough = TimestampTzPlusMilliseconds(now, req->args.lease_ms);
	uint32		track_epoch;
	const int  *holds;
	int			n;
	int			i;

	if (!rlock_vouching(now, true, req->args.fresh_after, &track_epoch))
		return false;
	n = rlock_owners_holds(req->args.owner_id, &holds);
	for (i = 0; i < n; i++)
	{
		uint32		generation;
		RlockHold	copy;

		if (!worker_hold_owned(holds[i], req->args.owner_id, true,
							   &generation))
			continue;
		rlock_hold_read(holds[i], &copy);
		if (!rlock_hold_is_current(&copy, generation) ||
			!rlock_hold_vouches_now(&copy, track_epoch, enough))
			return false;
	}
	return true;
}

/*
 * Send the verify script over every entry of the request's owner that
 * holds something, in batches.  The batches of one sending carry its
 * number, so that a reply to an earlier sending is never counted.
 */
static void
worker_send_verify(WorkerReq *req)
{
	WorkerBatcher b;
	const int  *holds;
	int			nholds;
	int			kind;
	int			i;

	req->attempt++;
	req->batches = 0;
	req->lost = 0;
	worker_set_state(req, REQ_INFLIGHT);
	if (worker_verify_vouched(req))
	{
		worker_complete(req, RLOCK_STATUS_OK, 0, NULL);
		return;
	}
	nholds = rlock_owners_holds(req->args.owner_id, &holds);
	/* a batch is one command of one kind, on one connection */
	for (kind = 0; kind < RLOCK_NKINDS; kind++)
	{
		worker_batcher_init(&b, WORKER_CMD_VERIFY, req->args.lease_ms,
							worker_slot_of(req), req->seq, req->attempt);
		for (i = 0; i < nholds; i++)
		{
			uint32		generation;

			/* an entry in use keeps its kind */
			if (worker_hold_owned(holds[i], req->args.owner_id, true,
								  &generation) &&
				rlock_hold(holds[i])->kind == kind)
				worker_batcher_add(&b, holds[i], generation);
		}
		req->batches += worker_batcher_finish(&b);
		if (b.failed)
		{
			/* the replies of this sending will not count */
			worker_make_pending(req);
			return;
		}
	}
	if (req->batches == 0)
		worker_complete(req, RLOCK_STATUS_OK, 0, NULL);
}

/*
 * Send a request about a key, or none: the request's kind's probe for
 * EXISTS and PTTL, its force script for FORCE, its holder script for
 * HOLDER, its call method for CALL, or PING for RELEASE and BARRIER (answered once everything sent
 * before it is).
 */
static void
worker_send_query(WorkerReq *req)
{
	WorkerCmd  *wc = worker_cmd_new(WORKER_CMD_QUERY);
	RlockArgs  *args = worker_args();
	const RlockKindMethod *kind = rlock_kinds[req->args.kind];

	switch (req->args.op)
	{
		case RLOCK_OP_FORCE:
			kind->force(args, &wc->cmd, req->key, req->args.keylen);
			break;
		case RLOCK_OP_HOLDER:
			kind->holder(args, &wc->cmd, req->key, req->args.keylen);
			break;
		case RLOCK_OP_CALL:
			kind->call(args, &wc->cmd, req->key, req->args.keylen,
					   req->args.call, req->args.call_arg);
			break;
		case RLOCK_OP_EXISTS:
		case RLOCK_OP_PTTL:
			kind->probe(args, &wc->cmd, req->key, req->args.keylen);
			break;
		default:
			rlock_args_cstr(args, "PING");
			wc->cmd.shape = RLOCK_SHAPE_PONG;
			break;
	}
	wc->slot = worker_slot_of(req);
	wc->seq = req->seq;
	wc->hold = req->args.hold;
	worker_set_state(req, REQ_INFLIGHT);
	if (!worker_cmd_send(worker_req_conn(req), wc, args))
		worker_make_pending(req);
}

/*
 * May a pending request be sent now?  Its connection must be ready, and
 * it waits while an acquire is on the wire for its entry (or, for a
 * BARRIER or VERIFY, for any entry of its owner): that reply may put
 * releases ahead of it.
 */
bool
worker_may_send(WorkerReq *req)
{
	if (!worker_req_ready(req))
		return false;
	if (req->args.op == RLOCK_OP_ACQUIRE ? worker_acquire_held_back(req) :
		req->args.op == RLOCK_OP_ACQUIRE_SET ? worker_set_held_back(req) :
		(req->args.op == RLOCK_OP_RELEASE ||
		 req->args.op == RLOCK_OP_BARRIER ||
		 req->args.op == RLOCK_OP_VERIFY) &&
		worker_owner_busy(req, true))
	{
		/*
		 * In a Redis Cluster an acquire also waits for its entry's
		 * releases to be answered: bounded, should one never be.
		 */
		if (req->timer_at == 0 && rlock_redis_cluster())
			worker_timer_set(req,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 (int64) rlock_command_timeout +
														 rlock_connect_timeout));
		return false;
	}
	return true;
}

/*
 * Send a request taken off the pending list.
 */
void
worker_send(WorkerReq *req)
{
	if (req->args.op == RLOCK_OP_ACQUIRE)
		worker_send_acquire(req);
	else if (req->args.op == RLOCK_OP_ACQUIRE_SET)
		worker_send_acquire_set(req);
	else if (req->args.op == RLOCK_OP_VERIFY)
		worker_send_verify(req);
	else
		worker_send_query(req);
}

/*
 * The gap a request keeps between tries once it has retried without a
 * wait RLOCK_QUICK_RETRIES times in a row: doubling from 1 ms, capped.
 */
static int
worker_retry_gap_ms(WorkerReq *req)
{
	int			over = req->quick_retries - RLOCK_QUICK_RETRIES;

	if (over < 0)
		return 0;
	return over >= 7 ? RLOCK_RETRY_GAP_MAX_MS :
		Min(1 << over, RLOCK_RETRY_GAP_MAX_MS);
}

/*
 * A waiting acquire should try again without waiting: at once, or, when
 * it has done so too often in a row, after a gap (waiting, so that its
 * deadline and a wake-up still count).
 */
void
worker_retry_soon(WorkerReq *req)
{
	int			gap = worker_retry_gap_ms(req);
	TimestampTz at;

	req->quick_retries++;
	if (gap == 0)
	{
		worker_make_pending(req);
		return;
	}
	at = TimestampTzPlusMilliseconds(req->last_try_at, gap);
	if (req->args.wait_until != 0)
		at = Min(at, req->args.wait_until);
	if (req->state != REQ_WAITING)
	{
		worker_set_state(req, REQ_WAITING);
		worker_mark_busy(req);
	}
	if (req->timer_at == 0 || at < req->timer_at)
		worker_timer_set(req, at);
}

/*
 * A waiting request should try again now.  False if it was not waiting
 * (its last try is still on the wire, say).  Only moves the request to
 * the pending list (or, past the quick retries, shortens its timer).
 */
bool
worker_retry(int slot, const char *key, int keylen)
{
	WorkerReq  *req = worker_req(slot);

	if (!worker_waiting(slot, key, keylen))
		return false;
	req->woken = true;
	req->handed = (key != NULL);
	if (req->handed)
		worker_make_pending(req);	/* the lock is its own: no gap */
	else
		worker_retry_soon(req);
	return true;
}

/*
 * A waiting request of "key" should try at "at" at the latest (a line
 * holding back for other clients).  False if it was not waiting.  The
 * lock is free and nobody else of the line will try: the request counts
 * as woken, so that if it ends before its try (cancelled, its wait over
 * first) it passes the try on, rather than leave the line asleep until
 * its timers, the lease of the lock it waited for, run out.
 */
bool
worker_retry_at(int slot, const char *key, int keylen, TimestampTz at)
{
	WorkerReq  *req = worker_req(slot);

	if (!worker_waiting(slot, key, keylen))
		return false;
	req->woken = true;
	if (req->args.wait_until != 0)
		at = Min(at, req->args.wait_until);
	if (req->timer_at == 0 || at < req->timer_at)
		worker_timer_set(req, at);
	return true;
}

/*
 * Does the request in "slot" wait for a wake-up (neither trying nor about
 * to)?  With a key, for that key.
 */
bool
worker_waiting(int slot, const char *key, int keylen)
{
	WorkerReq  *req = worker_req(slot);
	RlockHold  *h;

	if (req->state != REQ_WAITING || req->args.op != RLOCK_OP_ACQUIRE)
		return false;
	if (key == NULL)
		return true;
	h = rlock_hold(req->args.hold);
	return h->keylen == keylen && memcmp(h->key, key, keylen) == 0;
}

/*
 * Is the request in "slot" an acquisition of "key" still to be granted:
 * waiting, or trying after a wake-up or a hand-off?  Waiters are in a
 * group only until their grant, so every member of a line is one, but
 * for the other key ("k" and "{k}" share a channel).
 */
bool
worker_in_line(int slot, const char *key, int keylen)
{
	WorkerReq  *req = worker_req(slot);
	RlockHold  *h;

	if (req->state == REQ_NONE || req->args.op != RLOCK_OP_ACQUIRE)
		return false;
	h = rlock_hold(req->args.hold);
	return h->keylen == keylen && memcmp(h->key, key, keylen) == 0;
}

