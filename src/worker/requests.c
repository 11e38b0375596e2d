/*-------------------------------------------------------------------------
 *
 * requests.c
 *		The life of a request in the worker: taken off the ring, pending,
 *		in flight, waiting, answered.
 *
 * A request moves PENDING -> INFLIGHT -> done, or, when the lock is busy
 * and time remains, INFLIGHT -> WAITING -> PENDING -> INFLIGHT ...; an
 * acquire that joins the line of local waiters goes PENDING -> WAITING
 * without a try.  A waiting request is retried when an unlock message
 * arrives on its channel, when the subscription is confirmed, or when its
 * timer fires: after min(remaining TTL, remaining wait), as Redisson does.
 * RELEASE and BARRIER requests are answered by a PING sent after the
 * releases they cover; if one of those must be sent again, the request
 * waits (parked) until it is answered.  A VERIFY request (before a commit)
 * sends the verify script over every entry of its owner, in batches, and
 * counts the holds Redis no longer has.  Sending is in send.c, the
 * meaning of the answers in replies.c, the confirmation by replicas in
 * sync.c.
 *
 * While the worker works on a request for a hold entry it counts itself in
 * the entry's worker_refs, after checking that the entry is still the one
 * the backend named (same generation): the entry cannot be freed or reused
 * under it.  A grant that arrives for a request its backend gave up is
 * handed back at once.
 *
 * A request whose commands Redis has not answered for
 * rlock.command_timeout + rlock.connect_timeout, across reconnections,
 * fails with a connection error (the clock starts when the first command
 * that went unanswered was sent, and stops at any answer; a resend on the
 * wire at the deadline is given up like a request its backend left, its
 * late grant handed back), so that a broken or hostile server cannot hold
 * a session.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/requests.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/worker_int.h"

static WorkerReq *reqs;			/* one per slot */
static int	nreqs;
static int	nparked;			/* RELEASE and BARRIER requests WAITING */
static int	nwaiting;			/* ACQUIRE requests WAITING */
static pairingheap *timers;
static dlist_head pending = DLIST_STATIC_INIT(pending);

/*---- timers ----*/

static int
worker_timer_cmp(const pairingheap_node *a, const pairingheap_node *b,
				 void *arg)
{
	const WorkerReq *ra = pairingheap_const_container(WorkerReq, timer_node, a);
	const WorkerReq *rb = pairingheap_const_container(WorkerReq, timer_node, b);

	/* the heap puts its greatest element first: make earlier greater */
	if (ra->timer_at < rb->timer_at)
		return 1;
	if (ra->timer_at > rb->timer_at)
		return -1;
	return 0;
}

static void
worker_timer_cancel(WorkerReq *req)
{
	if (req->timer_at != 0)
	{
		pairingheap_remove(timers, &req->timer_node);
		req->timer_at = 0;
	}
}

void
worker_timer_set(WorkerReq *req, TimestampTz at)
{
	worker_timer_cancel(req);
	if (at == 0 || at == DT_NOEND)
		return;
	req->timer_at = at;
	pairingheap_add(timers, &req->timer_node);
}

void
worker_requests_init(int nslots)
{
	int			i;

	nreqs = nslots;
	reqs = MemoryContextAllocZero(rlock_worker_context,
								  sizeof(WorkerReq) * nslots);
	for (i = 0; i < nslots; i++)
		reqs[i].args.hold = -1;
	timers = pairingheap_allocate(worker_timer_cmp, NULL);
}

/*---- request bookkeeping ----*/

WorkerReq *
worker_req(int slot)
{
	Assert(slot >= 0 && slot < nreqs);
	return &reqs[slot];
}

int
worker_slot_of(WorkerReq *req)
{
	return req - reqs;
}

/*
 * Every change of a request's state goes through here.  The moves a
 * request may make are the ones in the file header.
 */
void
worker_set_state(WorkerReq *req, ReqState state)
{
	bool		parked_before = (req->state == REQ_WAITING &&
								 req->args.op != RLOCK_OP_ACQUIRE);
	bool		parked_after = (state == REQ_WAITING &&
								req->args.op != RLOCK_OP_ACQUIRE);

	Assert(state == REQ_NONE || state == REQ_PENDING ||
		   (state == REQ_INFLIGHT && req->state == REQ_PENDING) ||
		   (state == REQ_WAITING &&
			(req->state == REQ_INFLIGHT ||
			 (req->state == REQ_PENDING && req->args.op == RLOCK_OP_ACQUIRE))));
	Assert(state != REQ_PENDING || req->state != REQ_PENDING);

	nparked += (int) parked_after - (int) parked_before;
	if (req->args.op == RLOCK_OP_ACQUIRE)
		nwaiting += (int) (state == REQ_WAITING) -
			(int) (req->state == REQ_WAITING);
	req->state = state;
	Assert(nparked >= 0 && nwaiting >= 0);
}

/*
 * The sync connection an acquisition of the request goes on when
 * replicas must confirm it (sync.c), or NULL for a request that takes
 * nothing.  A set's keys share it.
 */
RlockConn *
worker_req_sync_conn(WorkerReq *req)
{
	if (req->args.op == RLOCK_OP_ACQUIRE)
		return worker_hold_sync_conn(req->args.hold);
	if (req->args.op == RLOCK_OP_ACQUIRE_SET)
		return worker_hold_sync_conn(req->set[0]);
	return NULL;
}

/*
 * Must replicas confirm what the request takes now?
 */
static bool
worker_req_synced(WorkerReq *req)
{
	RlockConn  *sync = worker_req_sync_conn(req);
	int			ask;

	return sync != NULL && rlock_redis_sync_need(sync, &ask) > 0;
}

/*
 * The latest a request whose commands go unanswered may wait before it
 * fails: rlock.command_timeout to be answered, rlock.connect_timeout to
 * find a connection again.  0 while nothing went unanswered.
 */
static TimestampTz
worker_unanswered_deadline(WorkerReq *req)
{
	if (req->unanswered_since == 0)
		return 0;
	/* a synced acquisition's WAIT may take rlock.sync_timeout more */
	return TimestampTzPlusMilliseconds(req->unanswered_since,
									   (int64) rlock_command_timeout +
									   rlock_connect_timeout +
									   (worker_req_synced(req) ?
										rlock_sync_timeout : 0));
}

/*
 * Put a request on the pending list.  Without a usable connection it gets
 * rlock.connect_timeout to find one; one whose commands went unanswered
 * gets no longer than its deadline.
 */
void
worker_make_pending(WorkerReq *req)
{
	TimestampTz at = 0;
	TimestampTz deadline = worker_unanswered_deadline(req);
	RlockConn  *sync = worker_req_sync_conn(req);

	worker_set_state(req, REQ_PENDING);
	dlist_push_tail(&pending, &req->pending_node);
	if (!worker_req_ready(req) ||
		(sync != NULL && worker_sync_conn_missing(sync)))
		at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										 rlock_connect_timeout);
	if (deadline != 0 && (at == 0 || deadline < at))
		at = deadline;
	if (at == 0)
		worker_timer_cancel(req);
	else
		worker_timer_set(req, at);
}

/*
 * An answer came for the request: the clock of unanswered commands stops,
 * and so does the deadline it set for the command on the wire.
 */
void
worker_note_answered(WorkerReq *req)
{
	req->unanswered_since = 0;
	req->failover_since = 0;
	if (req->state == REQ_INFLIGHT)
		worker_timer_cancel(req);
}

/*
 * A command of the request went unanswered (its connection was lost):
 * the request's clock runs from the first such command on.
 */
void
worker_note_unanswered(WorkerReq *req, WorkerCmd *wc)
{
	if (req->unanswered_since == 0)
		req->unanswered_since = wc->cmd.sent_at;
}

/*
 * Give-ups that found their connection down: sent, ahead of anything
 * else, once it is ready again (worker_give_ups_flush), so that an owner
 * whose wait ended in an outage does not stay at the head of the queue
 * until its deadline (a minute or more) once Redis is back.  Bounded: the
 * oldest is dropped for a new one, and goes when its entry's time runs
 * out, as an owner of an instance that died does.
 */
#define RLOCK_PENDING_GIVE_UPS	256

typedef struct PendingGiveUp
{
	RlockKind	kind;
	RlockKindHold hold;			/* key palloc'd in rlock_worker_context */
} PendingGiveUp;

static PendingGiveUp pending_give_ups[RLOCK_PENDING_GIVE_UPS];
static int	npending_give_ups = 0;

/*
 * Send a give-up where its owner's tries go (send.c): on the sync
 * connection when replicas must confirm acquisitions, so that it never
 * overtakes a try still on the wire there.  False if the connection took
 * nothing.
 */
static bool
worker_give_up_send(RlockKind kind, const RlockKindHold *kh)
{
	RlockConn  *sync = rlock_redis_sync_for(kh->key, kh->keylen);
	int			ask;
	RlockConn  *conn = sync != NULL && rlock_redis_sync_need(sync, &ask) > 0 ? sync :
		rlock_redis_route(kh->key, kh->keylen);
	WorkerCmd  *wc;
	RlockArgs  *args;

	if (conn == NULL || !rlock_conn_ready(conn))
		return false;
	wc = worker_cmd_new(WORKER_CMD_PUBLISH);
	args = worker_args();
	rlock_kinds[kind]->give_up(args, &wc->cmd, kh);
	return worker_cmd_send(conn, wc, args);
}

static void
worker_give_up_forget(int i)
{
	pfree((char *) pending_give_ups[i].hold.key);
	npending_give_ups--;
	memmove(&pending_give_ups[i], &pending_give_ups[i + 1],
			sizeof(PendingGiveUp) * (npending_give_ups - i));
}

/*
 * A request that may have put its owner in its kind's queue in Redis
 * ends without the lock: take the owner out, behind whatever the request
 * sent on the same connection (a try still on the wire queues first, and
 * is undone by this).  Its reply does not matter: an owner left in the
 * queue, the connection lost with the give-up on the wire, goes when its
 * entry's time runs out.
 */
static void
worker_give_up(WorkerReq *req)
{
	RlockHold  *h = rlock_hold(req->args.hold);
	PendingGiveUp g;
	char	   *key;

	memset(&g, 0, sizeof(g));
	g.kind = h->kind;
	g.hold.key = h->key;
	g.hold.keylen = h->keylen;
	g.hold.owner_id = h->owner_id;
	g.hold.mode = h->mode;
	g.hold.queue_ms = req->queue_ms;
	if (worker_give_up_send(g.kind, &g.hold))
		return;
	if (npending_give_ups == RLOCK_PENDING_GIVE_UPS)
	{
		elog(DEBUG1, "rlock: too many give-ups wait for Redis, dropping the oldest");
		worker_give_up_forget(0);
	}
	key = MemoryContextAlloc(rlock_worker_context, h->keylen + 1);
	memcpy(key, h->key, h->keylen);
	key[h->keylen] = '\0';
	g.hold.key = key;
	pending_give_ups[npending_give_ups++] = g;
}

/*
 * A command or sync connection is ready: send the give-ups whose key it
 * serves.
 */
void
worker_give_ups_flush(void)
{
	int			i = 0;

	while (i < npending_give_ups)
	{
		PendingGiveUp *p = &pending_give_ups[i];

		if (worker_give_up_send(p->kind, &p->hold))
			worker_give_up_forget(i);
		else
			i++;
	}
}

/*
 * Forget a request: it is answered, or its backend gave it up.  A command
 * still on the wire for it will find the request gone when answered.  A
 * request woken for a retry that it will now never send passes the
 * wake-up on to another waiter.
 */
void
worker_forget(WorkerReq *req)
{
	if (req->state == REQ_NONE)
		return;
	if (req->state == REQ_PENDING)
		dlist_delete(&req->pending_node);
	worker_timer_cancel(req);

	/*
	 * A request woken, or handed the lock, that ends without it passes the
	 * wake-up on: the lock may be free, and its unlock message was spent.
	 * The worker's loop does that once this event is handled.
	 */
	if (req->woken || req->handed)
	{
		RlockHold  *h = rlock_hold(req->args.hold);

		Assert(req->args.op == RLOCK_OP_ACQUIRE);
		rlock_waiters_pass_on(h->kind, h->key, h->keylen, req->handed);
	}
	rlock_waiters_leave(worker_slot_of(req));
	if (req->queued && !req->granted)
		worker_give_up(req);
	req->queued = false;
	req->woken = false;
	req->handed = false;
	if (req->key != NULL)
	{
		pfree(req->key);
		req->key = NULL;
	}
	worker_set_state(req, REQ_NONE);
	if (req->hold_counted)
	{
		req->hold_counted = false;
		rlock_hold_unref(req->args.hold);
	}
	if (req->set != NULL)
	{
		int			i;

		for (i = 0; i < req->args.nset; i++)
			rlock_hold_unref(req->set[2 * i]);
		pfree(req->set);
		req->set = NULL;
	}
}

/*
 * The request a reply belongs to, if it is still the current request of
 * its slot and still waits for that reply.
 */
WorkerReq *
worker_current(WorkerCmd *wc)
{
	WorkerReq  *req = &reqs[wc->slot];

	if (req->state == REQ_INFLIGHT && req->seq == wc->seq)
		return req;
	return NULL;
}

/*
 * Write the result into the slot, if the slot still waits for this
 * request, and wake its backend.  Returns false if the backend gave up.
 */
bool
worker_answer(int slot, uint64 seq, RlockStatus status, int64 value,
			  const char *detail)
{
	RlockSlot  *s = rlock_slot(slot);
	Latch	   *latch = NULL;

	SpinLockAcquire(&s->mutex);
	if (s->seq == seq && s->state == RLOCK_SLOT_TAKEN)
	{
		s->status = status;
		s->value = value;
		strlcpy(s->detail, detail ? detail : "", sizeof(s->detail));
		s->state = RLOCK_SLOT_DONE;
		latch = s->latch;
	}
	SpinLockRelease(&s->mutex);

	if (latch != NULL)
		SetLatch(latch);
	return latch != NULL;
}

void
worker_complete(WorkerReq *req, RlockStatus status, int64 value,
				const char *detail)
{
	(void) worker_answer(worker_slot_of(req), req->seq, status, value,
						 detail);
	worker_forget(req);
}

/*
 * Fail a request with Redis's error text.
 */
void
worker_complete_error(WorkerReq *req, const RlockReply *reply)
{
	char		detail[RLOCK_DETAIL_LEN];

	strlcpy(detail, reply->str, sizeof(detail));
	worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0, detail);
}

/*
 * Fail a request that found no connection, or whose commands went
 * unanswered, in time.
 */
static void
worker_complete_unreachable(WorkerReq *req)
{
	char		detail[RLOCK_DETAIL_LEN];
	RlockConn  *conn = worker_req_missing_conn(req);
	const char *note = rlock_redis_route_note(conn);

	if (req->unanswered_since != 0 && rlock_conn_ready(conn))
		snprintf(detail, sizeof(detail),
				 "Redis at %s did not answer within rlock.command_timeout + rlock.connect_timeout (" INT64_FORMAT " ms)%s%s.",
				 rlock_conn_address(conn),
				 (int64) rlock_command_timeout + rlock_connect_timeout,
				 note ? "; it last said: " : "", note ? note : "");
	else
		snprintf(detail, sizeof(detail),
				 "No usable connection to Redis at %s: %s.",
				 rlock_conn_address(conn), rlock_conn_error(conn));
	worker_complete(req, RLOCK_STATUS_CONNECTION, 0, detail);
}

/*
 * Mark an acquire as waiting for the lock, for the views and the process
 * title.  No wake-up: the backend looks at the mark by itself (see
 * rlock_wait_for_answer()), so that a request joining a busy key costs no
 * signal, which on a hot key would come right before the write that hands
 * the lock on.
 */
void
worker_mark_busy(WorkerReq *req)
{
	RlockSlot  *s = rlock_slot(worker_slot_of(req));

	SpinLockAcquire(&s->mutex);
	if (s->seq == req->seq && s->state == RLOCK_SLOT_TAKEN)
		s->busy = true;
	SpinLockRelease(&s->mutex);
}

/*
 * Send every pending request that may go now (send.c says when).
 */
void
worker_send_pending(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &pending)
	{
		WorkerReq  *req = dlist_container(WorkerReq, pending_node, iter.cur);

		if (!worker_may_send(req))
			continue;
		dlist_delete(&req->pending_node);
		/* a resend has the rest of the request's deadline, if any */
		worker_timer_set(req, worker_unanswered_deadline(req));
		worker_send(req);
	}
}

/*
 * RELEASE and BARRIER requests parked until the releases they cover are
 * answered: look again.
 */
void
worker_unpark(void)
{
	int			i;

	for (i = 0; i < nreqs && nparked > 0; i++)
	{
		WorkerReq  *req = &reqs[i];

		if (req->state != REQ_WAITING || req->args.op == RLOCK_OP_ACQUIRE)
			continue;
		if (!worker_release_refused_now(req) && !worker_owner_busy(req, false))
			worker_make_pending(req);
	}
}

bool
worker_parked(void)
{
	return nparked > 0;
}

/*
 * Does the worker have acquires waiting for a lock (which keep the command
 * connection checked)?
 */
bool
worker_requests_waiting(void)
{
	return nwaiting > 0;
}

/*
 * The command connection went away.  Every request that was pending or
 * waiting gets rlock.connect_timeout to see it come back: then it tries
 * again (a waiter re-subscribes and retries), else it fails.
 */
void
worker_requests_conn_lost(RlockConn *conn)
{
	int			i;

	for (i = 0; i < nreqs; i++)
	{
		WorkerReq  *req = &reqs[i];

		/* in a Redis Cluster, only the requests of that primary */
		if (req->state != REQ_NONE && rlock_redis_cluster() &&
			(req->key != NULL || req->args.hold >= 0) &&
			worker_req_conn(req) != conn)
			continue;

		if (req->state == REQ_WAITING)
			worker_make_pending(req);
		else if (req->state == REQ_PENDING && req->timer_at == 0)
			worker_timer_set(req,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 rlock_connect_timeout));
	}
}

/*
 * The sync connection went away: acquisitions pending for it get
 * rlock.connect_timeout to see it come back, as after a lost command
 * connection.
 */
void
worker_requests_sync_lost(RlockConn *sync)
{
	int			i;

	if (!worker_sync_conn_missing(sync))
		return;					/* not needed now */
	for (i = 0; i < nreqs; i++)
	{
		WorkerReq  *req = &reqs[i];

		if (req->state == REQ_PENDING && req->timer_at == 0 &&
			worker_req_sync_conn(req) == sync)
			worker_timer_set(req,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 rlock_connect_timeout));
	}
}

/*---- the ring and the timers ----*/

/*
 * Start the worker's copy of a request taken from a slot.
 */
static void
worker_start(WorkerReq *req, uint64 seq, const RlockRequestArgs *args,
			 const char *key, int *set)
{
	Assert(req->state == REQ_NONE && req->key == NULL && req->set == NULL);
	Assert(args->kind < RLOCK_NKINDS);
	req->seq = seq;
	req->args = *args;
	req->hold_counted = (args->hold >= 0);
	req->noscript = 0;
	req->woken = false;
	req->handed = false;
	req->tried = false;
	req->line_only = false;
	req->queued = false;
	req->granted = false;
	req->told_busy = false;
	req->failover_since = 0;
	req->unanswered_since = 0;
	req->quick_retries = 0;
	req->last_try_at = 0;
	req->set = set;
	if (args->keylen > 0)
	{
		req->key = MemoryContextAlloc(rlock_worker_context, args->keylen + 1);
		memcpy(req->key, key, args->keylen);
		req->key[args->keylen] = '\0';
	}
}

/*
 * Count the worker in the worker_refs of an ACQUIRE_SET's entries, whose
 * pairs the slot's key buffer holds; their copy, or NULL when one of them
 * is gone (its backend gave the request up) or the pairs are not sane.
 */
static int *
worker_set_ref(const RlockSlot *s, const RlockRequestArgs *args)
{
	int		   *set;
	int			i;

	if (args->nset < 1 || args->nset > RLOCK_SET_MAX_KEYS ||
		args->nset * 2 * (int) sizeof(int) > rlock_max_key_length)
		return NULL;
	set = MemoryContextAlloc(rlock_worker_context,
							 args->nset * 2 * sizeof(int));
	memcpy(set, s->key, args->nset * 2 * sizeof(int));
	for (i = 0; i < args->nset; i++)
	{
		if (set[2 * i] < 0 || set[2 * i] >= rlock_shared->nholds ||
			!rlock_hold_ref(set[2 * i], (uint32) set[2 * i + 1]))
		{
			while (--i >= 0)
				rlock_hold_unref(set[2 * i]);
			pfree(set);
			return NULL;
		}
	}
	for (i = 0; i < args->nset; i++)
		rlock_owners_note(set[2 * i]);
	return set;
}

/*
 * A slot came off the ring: a new request, or one its backend gave up.
 */
void
worker_take_slot(int slot)
{
	RlockSlot  *s = rlock_slot(slot);
	WorkerReq  *req = &reqs[slot];
	RlockSlotState state;
	uint64		seq;
	RlockRequestArgs args;
	int		   *set = NULL;

	memset(&args, 0, sizeof(args));
	SpinLockAcquire(&s->mutex);
	s->queued = false;
	state = s->state;
	seq = s->seq;
	if (state == RLOCK_SLOT_PENDING)
	{
		s->state = RLOCK_SLOT_TAKEN;
		args = s->args;
	}
	SpinLockRelease(&s->mutex);

	/* anything else the worker had for this slot was given up */
	if (req->state != REQ_NONE &&
		(state != RLOCK_SLOT_TAKEN || req->seq != seq))
		worker_forget(req);
	if (state != RLOCK_SLOT_PENDING)
		return;

	if (rlock_worker_stopping)
	{
		(void) worker_answer(slot, seq, RLOCK_STATUS_SHUTDOWN, 0,
							 "The rlock background worker is shutting down.");
		return;
	}

	if (args.hold >= 0 && !rlock_hold_ref(args.hold, args.hold_generation))
	{
		/* the entry is gone, so its backend gave the request up already */
		(void) worker_answer(slot, seq, RLOCK_STATUS_SHUTDOWN, 0,
							 "The request was given up.");
		return;
	}
	if (args.hold >= 0)
		rlock_owners_note(args.hold);
	if (args.op == RLOCK_OP_ACQUIRE_SET &&
		(set = worker_set_ref(s, &args)) == NULL)
	{
		if (args.hold >= 0)
			rlock_hold_unref(args.hold);
		(void) worker_answer(slot, seq, RLOCK_STATUS_SHUTDOWN, 0,
							 "The request was given up.");
		return;
	}

	/*
	 * The backend does not touch the key while the slot is TAKEN; if it
	 * gave the request up meanwhile, the copy is dropped below.
	 */
	worker_start(req, seq, &args, s->key, set);
	worker_make_pending(req);

	SpinLockAcquire(&s->mutex);
	if (s->seq != seq || s->state != RLOCK_SLOT_TAKEN)
		state = RLOCK_SLOT_IDLE;
	SpinLockRelease(&s->mutex);
	if (state == RLOCK_SLOT_IDLE)
		worker_forget(req);
}

/*
 * Does a request that found no connection in time keep waiting for one?
 * A waiter (an acquisition Redis told the lock is busy) still inside its
 * wait does, while a Sentinel or a Redis Cluster node answers, for
 * rlock.failover_timeout at most: a failover takes the Sentinels'
 * down-after time and a vote, longer than rlock.connect_timeout, and the
 * waiter would lose its place for nothing.  Everything else fails, as
 * with a single server: a new acquisition, and a waiter whose primary is
 * named again and again but stays out of reach (another password, an
 * address this host cannot reach, a certificate without its name).
 */
static bool
worker_awaits_failover(WorkerReq *req, TimestampTz now)
{
	if (req->args.op != RLOCK_OP_ACQUIRE || !req->told_busy ||
		(req->args.wait_until != 0 && now >= req->args.wait_until) ||
		(worker_req_ready(req) &&
		 !worker_sync_conn_missing(worker_hold_sync_conn(req->args.hold))) ||
		!rlock_redis_failover_awaited())
		return false;
	if (req->failover_since == 0)
		req->failover_since = now;
	/* a primary named again and again but out of reach is an outage */
	return now < TimestampTzPlusMilliseconds(req->failover_since,
											 rlock_failover_timeout);
}

/*
 * When to look again: after rlock.connect_timeout (the Sentinels may
 * stop answering meanwhile), at the latest when the wait or
 * rlock.failover_timeout ends.
 */
static TimestampTz
worker_failover_recheck(WorkerReq *req, TimestampTz now)
{
	TimestampTz at = TimestampTzPlusMilliseconds(now, rlock_connect_timeout);
	TimestampTz bound = TimestampTzPlusMilliseconds(req->failover_since,
													rlock_failover_timeout);

	if (req->args.wait_until != 0 && req->args.wait_until < at)
		at = req->args.wait_until;
	return Min(at, bound);
}

void
worker_fire_timers(TimestampTz now)
{
	while (!pairingheap_is_empty(timers))
	{
		WorkerReq  *req = pairingheap_container(WorkerReq, timer_node,
												pairingheap_first(timers));
		if (req->timer_at > now)
			break;
		worker_timer_cancel(req);

		if (req->state == REQ_PENDING && worker_awaits_failover(req, now))
		{
			/*
			 * Whatever went unanswered is restated with the entry (its
			 * resync); the try sent on the new primary gets a deadline
			 * of its own.
			 */
			req->unanswered_since = 0;
			worker_timer_set(req, worker_failover_recheck(req, now));
		}
		else if (req->state == REQ_PENDING || req->state == REQ_INFLIGHT)
			worker_complete_unreachable(req);	/* its deadline passed */
		else if (req->state == REQ_WAITING)
		{
			if (req->args.wait_until != 0 && now >= req->args.wait_until &&
				!req->line_only)
				worker_complete(req, RLOCK_STATUS_BUSY, 0, NULL);
			else
				worker_make_pending(req);	/* a last try, if in line */
		}
	}
}

TimestampTz
worker_next_timer(void)
{
	if (pairingheap_is_empty(timers))
		return DT_NOEND;
	return pairingheap_container(WorkerReq, timer_node,
								 pairingheap_first(timers))->timer_at;
}

/*
 * SIGTERM came: answer every request.
 */
void
worker_requests_stop(void)
{
	int			i;

	for (i = 0; i < nreqs; i++)
	{
		if (reqs[i].state != REQ_NONE)
			worker_complete(&reqs[i], RLOCK_STATUS_SHUTDOWN, 0,
							"The rlock background worker exited.");
	}
}
