/*-------------------------------------------------------------------------
 *
 * requests.c
 *		The life of a request in the worker: taken off the ring, sent,
 *		waiting, answered.
 *
 * A request moves PENDING -> INFLIGHT -> done, or, when the lock is busy
 * and time remains, INFLIGHT -> WAITING -> PENDING -> INFLIGHT ...; an
 * acquire that joins the line of local waiters goes PENDING -> WAITING
 * without a try.  A
 * waiting request is retried when an unlock message arrives on its
 * channel, when the subscription is confirmed, or when its timer fires:
 * after min(remaining TTL, remaining wait), as Redisson does.  RELEASE and
 * BARRIER requests are answered by a PING sent after the releases they
 * cover; if one of those must be sent again, the request waits (parked)
 * until it is answered.  A VERIFY request (before a commit) sends the
 * verify script over every entry of its owner, in batches, and counts the
 * holds Redis no longer has.
 *
 * While the worker works on a request for a hold entry it counts itself in
 * the entry's worker_refs, after checking that the entry is still the one
 * the backend named (same generation): the entry cannot be freed or reused
 * under it.  A grant that arrives for a request its backend gave up is
 * handed back at once.
 *
 * Two bounds keep a broken or hostile server from holding a session or
 * the worker: a request whose commands Redis has not answered for
 * rlock.command_timeout + rlock.connect_timeout, across reconnections,
 * fails with a connection error (the clock starts when the first command
 * that went unanswered was sent, and stops at any answer; a resend on the
 * wire at the deadline is given up like a request its backend left, its
 * late grant handed back); and a request
 * told to retry at once again and again (a lease that is always just
 * ending, a flood of unlock messages) is slowed down after a few such
 * retries, up to RLOCK_RETRY_GAP_MAX_MS between tries.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/requests.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/pairingheap.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/worker_int.h"

typedef enum ReqState
{
	REQ_NONE,					/* no request for this slot */
	REQ_PENDING,				/* to be sent when the connection allows */
	REQ_INFLIGHT,				/* its command is on the wire */
	REQ_WAITING					/* ACQUIRE: the lock is busy; RELEASE and
								 * BARRIER: a release they cover is still
								 * to be answered */
} ReqState;

/* The worker's copy of a slot's request */
typedef struct WorkerReq
{
	ReqState	state;
	uint64		seq;
	RlockOp		op;
	uint64		owner_id;
	int			hold;			/* ACQUIRE, RELEASE: the entry, else -1 */
	bool		hold_counted;	/* counted in the entry's worker_refs */
	char	   *key;			/* EXISTS, PTTL: the key */
	int			keylen;
	TimestampTz wait_until;		/* ACQUIRE: 0 = no limit */
	int64		lease_ms;		/* ACQUIRE: 0 = the watchdog; VERIFY: margin */
	bool		want_token;		/* ACQUIRE: count a fencing token */
	int			batches;		/* VERIFY: batch replies still to come */
	int			attempt;		/* VERIFY: sending of the batches */
	int64		lost;			/* VERIFY: holds found lost so far */
	uint64		wakes_seen;		/* wake-ups of its channel at last send */
	uint64		releases_seen;	/* releases sent at last send */
	bool		woken;			/* retried by a wake-up, try not yet sent */
	bool		handed;			/* ACQUIRE: handed the lock by a release of
								 * this instance, and not answered yet */
	bool		tried;			/* ACQUIRE: tried, or joined the line */
	bool		told_busy;		/* ACQUIRE: a waiter: Redis said busy, or
								 * it joined the line of those it said so */
	TimestampTz failover_since; /* ACQUIRE: began to wait for a failover to
								 * name a reachable primary, 0 if not */
	bool		line_only;		/* ACQUIRE: joined the line, never tried */
	int			noscript;		/* NOSCRIPT retries so far */
	TimestampTz unanswered_since;	/* sending of the first command that
									 * went unanswered, 0 if none */
	int			quick_retries;	/* retries in a row without a wait */
	TimestampTz last_try_at;	/* when the latest try was sent */
	TimestampTz timer_at;		/* 0 = no timer */
	pairingheap_node timer_node;
	dlist_node	pending_node;
} WorkerReq;

/* The longest a busy answer's lease is believed: one day */
#define RLOCK_MAX_TTL_MS		(INT64CONST(24) * 3600 * 1000)

/* Retry a request whose script Redis had lost at most this often */
#define RLOCK_NOSCRIPT_RETRIES	2

/* Retries without a wait allowed in a row; after them, a growing gap */
#define RLOCK_QUICK_RETRIES		4
#define RLOCK_RETRY_GAP_MAX_MS	100

static WorkerReq *reqs;			/* one per slot */
static int	nreqs;
static int	nparked;			/* RELEASE and BARRIER requests WAITING */
static int	nwaiting;			/* ACQUIRE requests WAITING */
static pairingheap *timers;
static dlist_head pending = DLIST_STATIC_INIT(pending);

/*
 * Synced acquisitions (rlock.sync_replicas) go out in batches: every
 * acquisition sent in one pass of the worker, then one WAIT for them all
 * (WAIT covers every write sent before it on the connection).  While a
 * WAIT is on the wire no acquisition is sent: each WAIT may block the
 * connection for rlock.sync_timeout, and WAITs queued behind one another
 * would add up.  Granted acquisitions wait for their batch's WAIT in
 * sync_granted (copies of their commands).  In a Redis Cluster each
 * primary has its sync connection, and each connection its batches
 * (SyncConn).
 *
 * sync_lost_on: per hold entry, the sync connection on which an
 * acquisition went unanswered, or NULL (the entry is restated only once
 * that connection was made again, and so the old one closed on the
 * server: see handshake_fence; or, in a Redis Cluster, once that node is
 * no primary any more).
 */
typedef struct SyncConn
{
	uint64		batch;			/* tag of the batch being sent, 0 if none */
	int			need;
	int			ask;
	uint64		unwaited;		/* a batch whose WAIT could not be sent */
	bool		wait_inflight;
	uint64		wait_seq;		/* the WAIT on the wire: its send_seq, */
	uint64		wait_tag;		/* its batch, */
	int			wait_need;		/* and what that batch needs */
} SyncConn;

static uint64 sync_next_tag = 0;
static List *sync_batched = NIL;	/* connections with a batch to end */
static List *sync_granted = NIL;
static RlockConn **sync_lost_on;

static void worker_mark_busy(WorkerReq *req);
static void worker_sync_settle_tag(uint64 tag, int64 acks,
								   const RlockReply *reply);
static bool worker_sync_conn_missing(RlockConn *sync);
static RlockConn *worker_hold_sync_conn(int index);
static bool worker_release_refused_now(WorkerReq *req);

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

static void
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
		reqs[i].hold = -1;
	timers = pairingheap_allocate(worker_timer_cmp, NULL);
	sync_lost_on = MemoryContextAllocZero(rlock_worker_context,
										  sizeof(RlockConn *) * rlock_shared->nholds);
}

/*---- request bookkeeping ----*/

static inline int
worker_slot_of(WorkerReq *req)
{
	return req - reqs;
}

/*
 * Every change of a request's state goes through here.  The moves a
 * request may make are the ones in the file header.
 */
static void
worker_set_state(WorkerReq *req, ReqState state)
{
	bool		parked_before = (req->state == REQ_WAITING &&
								 req->op != RLOCK_OP_ACQUIRE);
	bool		parked_after = (state == REQ_WAITING &&
								req->op != RLOCK_OP_ACQUIRE);

	Assert(state == REQ_NONE || state == REQ_PENDING ||
		   (state == REQ_INFLIGHT && req->state == REQ_PENDING) ||
		   (state == REQ_WAITING &&
			(req->state == REQ_INFLIGHT ||
			 (req->state == REQ_PENDING && req->op == RLOCK_OP_ACQUIRE))));
	Assert(state != REQ_PENDING || req->state != REQ_PENDING);

	nparked += (int) parked_after - (int) parked_before;
	if (req->op == RLOCK_OP_ACQUIRE)
		nwaiting += (int) (state == REQ_WAITING) -
			(int) (req->state == REQ_WAITING);
	req->state = state;
	Assert(nparked >= 0 && nwaiting >= 0);
}

/*
 * The latest a request whose commands go unanswered may wait before it
 * fails: rlock.command_timeout to be answered, rlock.connect_timeout to
 * find a connection again.  0 while nothing went unanswered.
 */
static TimestampTz
worker_unanswered_deadline(WorkerReq *req)
{
	int			ask;

	if (req->unanswered_since == 0)
		return 0;
	/* a synced acquisition's WAIT may take rlock.sync_timeout more */
	return TimestampTzPlusMilliseconds(req->unanswered_since,
									   (int64) rlock_command_timeout +
									   rlock_connect_timeout +
									   (req->op == RLOCK_OP_ACQUIRE &&
										rlock_redis_sync_need(worker_hold_sync_conn(req->hold),
															  &ask) > 0 ?
										rlock_sync_timeout : 0));
}

/*
 * The connection a request's commands go on: its key's, or its entry's
 * key's; for one with neither (BARRIER, VERIFY), any command connection.
 */
static RlockConn *
worker_req_conn(WorkerReq *req)
{
	if (req->key != NULL)
		return rlock_redis_route(req->key, req->keylen);
	if (req->hold >= 0)
		return rlock_hold_conn(req->hold);
	return rlock_redis_command_conn();
}

/*
 * Does a VERIFY check this entry: its owner's, holding something?
 */
static bool
worker_verify_checks(WorkerReq *req, int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		checks;

	SpinLockAcquire(&h->mutex);
	checks = h->in_use && h->owner_id == req->owner_id &&
		h->count - h->to_release > 0;
	SpinLockRelease(&h->mutex);
	return checks;
}

/*
 * Can the request be sent now: is its connection ready?  A VERIFY needs
 * the connections of the entries it checks.
 */
static bool
worker_req_ready(WorkerReq *req)
{
	const int  *holds;
	int			n;
	int			i;

	if (req->op != RLOCK_OP_VERIFY || !rlock_redis_cluster())
		return rlock_conn_ready(worker_req_conn(req));
	n = rlock_owners_holds(req->owner_id, &holds);
	for (i = 0; i < n; i++)
	{
		if (worker_verify_checks(req, holds[i]) &&
			!rlock_conn_ready(rlock_hold_conn(holds[i])))
			return false;
	}
	return rlock_conn_ready(rlock_redis_command_conn());
}

/*
 * The connection a request waits for, for messages: for a VERIFY, the
 * first of its owner's entries that is not ready.
 */
static RlockConn *
worker_req_missing_conn(WorkerReq *req)
{
	const int  *holds;
	int			n;
	int			i;

	if (req->op == RLOCK_OP_VERIFY && rlock_redis_cluster())
	{
		n = rlock_owners_holds(req->owner_id, &holds);
		for (i = 0; i < n; i++)
		{
			if (worker_verify_checks(req, holds[i]) &&
				!rlock_conn_ready(rlock_hold_conn(holds[i])))
				return rlock_hold_conn(holds[i]);
		}
	}
	return worker_req_conn(req);
}

/*
 * Put a request on the pending list.  Without a usable connection it gets
 * rlock.connect_timeout to find one; one whose commands went unanswered
 * gets no longer than its deadline.
 */
static void
worker_make_pending(WorkerReq *req)
{
	TimestampTz at = 0;
	TimestampTz deadline = worker_unanswered_deadline(req);

	worker_set_state(req, REQ_PENDING);
	dlist_push_tail(&pending, &req->pending_node);
	if (!worker_req_ready(req) ||
		(req->op == RLOCK_OP_ACQUIRE &&
		 worker_sync_conn_missing(worker_hold_sync_conn(req->hold))))
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
static void
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
static void
worker_note_unanswered(WorkerReq *req, WorkerCmd *wc)
{
	if (req->unanswered_since == 0)
		req->unanswered_since = wc->cmd.sent_at;
}

/*
 * Count the worker in an entry's worker_refs for a request, if the entry
 * is still the one the backend named.  False if it is not: the backend
 * gave the request up and the entry was freed.
 */
static bool
worker_hold_count_in(int index, uint32 generation)
{
	RlockHold  *h = rlock_hold(index);
	bool		ok;

	SpinLockAcquire(&h->mutex);
	ok = h->in_use && h->generation == generation;
	if (ok)
		h->worker_refs++;
	SpinLockRelease(&h->mutex);
	return ok;
}

static void
worker_hold_count_out(int index)
{
	RlockHold  *h = rlock_hold(index);

	SpinLockAcquire(&h->mutex);
	Assert(h->worker_refs > 0);
	h->worker_refs--;
	SpinLockRelease(&h->mutex);
	rlock_hold_try_free(index);
}

/*
 * Forget a request: it is answered, or its backend gave it up.  A command
 * still on the wire for it will find the request gone when answered.  A
 * request woken for a retry that it will now never send passes the
 * wake-up on to another waiter.
 */
static void
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
	 */
	if (!rlock_waiters_leave(worker_slot_of(req), req->woken || req->handed,
							 req->handed ? rlock_hold(req->hold)->key : NULL,
							 req->handed ? rlock_hold(req->hold)->keylen : 0))
	{
		/* no one took its wake-up: tries on the wire must not sleep */
		RlockHold  *h = rlock_hold(req->hold);

		worker_note_release(h->key, h->keylen);
	}
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
		worker_hold_count_out(req->hold);
	}
}

/*
 * The request a reply belongs to, if it is still the current request of
 * its slot and still waits for that reply.
 */
static WorkerReq *
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
static bool
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

static void
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
static void
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

/*---- synced acquisitions ----*/

/*
 * The worker's state of a sync connection.
 */
static SyncConn *
worker_sync_state(RlockConn *sync)
{
	void	  **data = rlock_conn_worker_data(sync);

	if (*data == NULL)
		*data = MemoryContextAllocZero(rlock_worker_context, sizeof(SyncConn));
	return (SyncConn *) *data;
}

/*
 * The sync connection of an entry: its key's.
 */
static RlockConn *
worker_hold_sync_conn(int index)
{
	RlockHold  *h = rlock_hold(index);

	return rlock_redis_sync_for(h->key, h->keylen);
}

/*
 * Must acquisitions on this sync connection be synced now, and is it
 * missing?
 */
static bool
worker_sync_conn_missing(RlockConn *sync)
{
	int			ask;

	return rlock_redis_sync_need(sync, &ask) > 0 && !rlock_conn_ready(sync);
}

/*
 * May an entry be restated on the command connection now?  Not while an
 * acquisition sent for it on a lost sync connection may still run on the
 * server: only once the sync connection is made again (its handshake
 * closed the old one there), or is no longer used.
 */
bool
worker_sync_may_resync(int index)
{
	RlockConn  *sync = sync_lost_on[index];

	if (sync == NULL)
		return true;
	if (rlock_redis_cluster())
	{
		/*
		 * Made again (for the fence, even when unused), or not to be made
		 * again: a node that no longer serves slots runs no write of ours
		 * (dead, or a replica refusing it).
		 */
		if (!rlock_conn_ready(sync) && rlock_redis_conn_wanted(sync))
			return false;
	}
	/* a new sync connection is made for the fence even when unused */
	else if (!rlock_conn_ready(sync) &&
			 (rlock_sync_replicas != RLOCK_SYNC_OFF ||
			  rlock_redis_sync_fence_owed(sync)))
		return false;
	sync_lost_on[index] = NULL;
	return true;
}

/*
 * A sync connection is (back) up: entries held back for it may be
 * restated.
 */
void
worker_sync_conn_ready(RlockConn *sync)
{
	int			i;

	/* its handshake closed the lost one on the server: the fence is up */
	for (i = 0; i < rlock_shared->nholds; i++)
	{
		if (sync_lost_on[i] == sync)
			sync_lost_on[i] = NULL;
	}
	worker_requeue_all_holds();
}

/*
 * End each batch of synced acquisitions sent in this pass with WAIT on its
 * connection: it answers once "ask" replicas confirmed every write sent
 * before it on the connection, or rlock.sync_timeout passed.
 */
void
worker_sync_flush(void)
{
	ListCell   *lc;
	List	   *later = NIL;

	foreach(lc, sync_batched)
	{
		RlockConn  *sync = (RlockConn *) lfirst(lc);
		SyncConn   *sc = worker_sync_state(sync);
		WorkerCmd  *wc;
		RlockArgs  *args;

		if (sc->batch == 0)
			continue;
		if (sc->wait_inflight)
		{
			/* grants redirected here: one WAIT at a time on a connection */
			MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);

			later = lappend(later, sync);
			MemoryContextSwitchTo(old);
			continue;
		}
		wc = worker_cmd_new(WORKER_CMD_SYNC);
		args = worker_args();
		rlock_args_cstr(args, "WAIT");
		rlock_args_int(args, sc->ask);
		rlock_args_int(args, rlock_sync_timeout);
		wc->cmd.shape = RLOCK_SHAPE_INTEGER;
		wc->sync_tag = sc->batch;
		wc->sync_need = sc->need;
		if (worker_cmd_send(sync, wc, args))
		{
			sc->wait_inflight = true;
			sc->wait_seq = wc->cmd.send_seq;
			sc->wait_tag = sc->batch;
			sc->wait_need = sc->need;
		}
		else
		{
			/*
			 * Its grants count as unconfirmed: those still on the wire
			 * when they come, those answered already (redirected here)
			 * now.  The connection goes too: a later batch must not find
			 * these grants still on the wire.
			 */
			sc->unwaited = sc->batch;
			worker_sync_settle_tag(sc->batch, -1, NULL);
			rlock_conn_give_up(sync,
							   "the sync connection could not take a WAIT");
		}
		sc->batch = 0;
	}
	list_free(sync_batched);
	sync_batched = later;
}

/*---- hold entries ----*/

static bool
worker_hold_acquiring(int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		acquiring;

	SpinLockAcquire(&h->mutex);
	acquiring = h->acquiring;
	SpinLockRelease(&h->mutex);
	return acquiring;
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
	int			index = req->hold;
	RlockHold  *h = rlock_hold(index);
	RlockConn  *sync = worker_hold_sync_conn(index);
	int			ask;
	bool		held;

	if (rlock_redis_sync_need(sync, &ask) > 0)
	{
		if (!rlock_conn_ready(sync) || worker_sync_state(sync)->wait_inflight)
			return true;

		/*
		 * Handed the lock by a release of this instance: that release
		 * went on the command connection, which orders nothing against
		 * this one, so the try waits for its answer rather than overtake
		 * it, find the lock still held and sleep.
		 */
		if (req->handed && worker_release_inflight(h->key, h->keylen))
			return true;
	}
	else if (!rlock_redis_cluster())
		return worker_hold_acquiring(index);
	SpinLockAcquire(&h->mutex);
	held = h->acquiring || h->queued || h->resync || h->unacked > 0 ||
		h->to_release > 0;
	SpinLockRelease(&h->mutex);
	return held;
}

/*
 * Has everything queued on an entry been sent and answered?
 */
static bool
worker_hold_settled(RlockHold *h)
{
	bool		settled;

	SpinLockAcquire(&h->mutex);
	settled = !h->in_use ||
		(h->to_release == 0 && h->unacked == 0 && !h->resync &&
		 !h->queued && !h->acquiring);
	SpinLockRelease(&h->mutex);
	return settled;
}

/*
 * Is some release covered by a RELEASE, BARRIER or VERIFY request not
 * answered yet?  RELEASE covers its entry, the others every entry of
 * their owner.  With "acquiring", only entries with an acquire on the wire
 * count (such requests are not sent before the releases queued behind
 * those acquires are).
 */
static bool
worker_owner_busy(WorkerReq *req, bool acquiring)
{
	const int  *holds;
	int			n;
	int			i;

	if (req->op == RLOCK_OP_RELEASE)
		return acquiring ? worker_hold_acquiring(req->hold) :
			!worker_hold_settled(rlock_hold(req->hold));

	n = rlock_owners_holds(req->owner_id, &holds);
	for (i = 0; i < n; i++)
	{
		RlockHold  *h = rlock_hold(holds[i]);
		bool		mine;

		SpinLockAcquire(&h->mutex);
		mine = h->in_use && h->owner_id == req->owner_id;
		SpinLockRelease(&h->mutex);
		if (!mine)
			continue;
		if (acquiring ? worker_hold_acquiring(holds[i]) :
			!worker_hold_settled(h))
			return true;
	}
	return false;
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

		if (req->state != REQ_WAITING || req->op == RLOCK_OP_ACQUIRE)
			continue;
		if (!worker_release_refused_now(req) && !worker_owner_busy(req, false))
			worker_make_pending(req);
	}
}

/*
 * A RELEASE request whose release Redis refused: it fails now with what
 * Redis said, rather than waiting for a release that is sent again only
 * later, maybe much later (the hold stays queued, and its release goes on
 * being sent).  True if it was so answered.
 */
static bool
worker_release_refused_now(WorkerReq *req)
{
	const char *error;

	if (req->op != RLOCK_OP_RELEASE ||
		!worker_release_refused(req->hold, &error))
		return false;
	worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0, error);
	return true;
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

/*---- sending requests ----*/

/*
 * A first acquire that may wait, for a lock that requests of this
 * instance already wait for, joins their line without trying: the lock
 * is held, and a hand-off or an unlock message will let it try in turn.
 * Its timer is the lease end the line's latest busy answer gave (at most
 * rlock.watchdog_timeout away) or its own deadline, so that a missed
 * wake-up costs time, not a hang; at its deadline it tries once before it
 * gives up.
 */
static bool
worker_join_line(WorkerReq *req)
{
	RlockHold  *h = rlock_hold(req->hold);
	TimestampTz busy_until;
	TimestampTz now;
	TimestampTz retry_at;

	busy_until = rlock_waiters_line(h->key, h->keylen);
	now = GetCurrentTimestamp();
	if (busy_until <= now)
		return false;			/* no line, or the lease may be over */
	if (req->wait_until != 0 && now >= req->wait_until)
		return false;			/* may not wait: it tries */

	req->tried = true;
	req->line_only = true;
	req->told_busy = true;
	rlock_waiters_join(worker_slot_of(req), h->key, h->keylen);
	worker_set_state(req, REQ_WAITING);
	worker_mark_busy(req);
	retry_at = Min(busy_until,
				   TimestampTzPlusMilliseconds(now, rlock_watchdog_timeout));
	if (req->wait_until != 0)
		retry_at = Min(retry_at, req->wait_until);
	worker_timer_set(req, retry_at);
	return true;
}

static void
worker_send_acquire(WorkerReq *req)
{
	int			slot = worker_slot_of(req);
	RlockHold  *h = rlock_hold(req->hold);
	RlockKindHold kh;
	RlockArgs  *args;
	WorkerCmd  *wc;
	int32		target;
	int			ask;
	RlockConn  *sync = worker_hold_sync_conn(req->hold);
	int			need = rlock_redis_sync_need(sync, &ask);
	RlockConn  *conn = need > 0 ? sync : rlock_hold_conn(req->hold);

	/* only the worker changes count: no need to read it under the mutex */
	if (h->count == 0 && !req->tried && worker_join_line(req))
		return;

	SpinLockAcquire(&h->mutex);
	Assert(h->count >= 0 && !h->acquiring);
	target = h->count + 1;
	kh.owner_id = h->owner_id;
	h->acquiring = true;
	SpinLockRelease(&h->mutex);
	kh.key = h->key;
	kh.keylen = h->keylen;

	wc = worker_cmd_new(WORKER_CMD_ACQUIRE);
	wc->slot = slot;
	wc->seq = req->seq;
	wc->hold = req->hold;
	wc->target = target;
	wc->lease_ms = worker_lease(req->lease_ms);
	wc->want_token = req->want_token;
	if (need > 0)
	{
		SyncConn   *sc = worker_sync_state(sync);

		if (sc->batch == 0)
		{
			MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);

			sc->batch = ++sync_next_tag;
			sc->need = need;
			sc->ask = ask;
			sync_batched = lappend(sync_batched, sync);
			MemoryContextSwitchTo(old);
		}
		wc->sync_tag = sc->batch;
		wc->sync_need = sc->need;
		wc->cmd.writes_locks = true;	/* a lost one needs the fence */
	}
	args = worker_args();
	rlock_kinds[h->kind]->acquire(args, &wc->cmd, &kh, target,
									wc->lease_ms, req->want_token);
	req->wakes_seen = rlock_waiters_wakes(slot);
	req->releases_seen = worker_releases_sent();
	req->woken = false;
	req->tried = true;
	req->line_only = false;
	req->last_try_at = GetCurrentTimestamp();
	worker_set_state(req, REQ_INFLIGHT);
	if (!worker_cmd_send(conn, wc, args))
	{
		SpinLockAcquire(&h->mutex);
		h->acquiring = false;
		SpinLockRelease(&h->mutex);
		worker_make_pending(req);
	}
}

/*
 * The grant an acquisition waits for is settled: answer it, or hand back
 * what Redis granted if its backend gave up.
 */
static void
worker_grant(WorkerCmd *wc, WorkerReq *req, int64 value)
{
	RlockHold  *h = rlock_hold(wc->hold);

	if (req == NULL)
	{
		rlock_queue_release(wc->hold, 1, -1, false);
		return;
	}
	worker_note_answered(req);
	/* the line now waits for this grant's lease at most */
	rlock_waiters_busy_until(wc->slot, h->key, h->keylen,
							 TimestampTzPlusMilliseconds(wc->cmd.sent_at,
														 wc->lease_ms));
	req->handed = false;		/* taken: its release will hand it on */
	if (!worker_answer(wc->slot, req->seq, RLOCK_STATUS_OK, value, NULL))
		rlock_queue_release(wc->hold, 1, -1, false);
	worker_forget(req);
}

/*
 * A granted acquisition's batch was answered by WAIT with "acks"
 * confirmations (-1: no answer, or an error "reply").  Enough: the grant
 * stands.  Too few, or no answer: the acquisition is undone (the entry's
 * previous count is restated, as after any unconfirmed grant) and the
 * request fails, or, when the answer was lost, tries again.
 */
static void
worker_sync_settle(WorkerCmd *wc, int64 acks, const RlockReply *reply)
{
	RlockHold  *h = rlock_hold(wc->hold);
	WorkerReq  *req;
	bool		confirmed = acks >= wc->sync_need;

	SpinLockAcquire(&h->mutex);
	Assert(h->acquiring);
	h->acquiring = false;
	if (!confirmed)
	{
		h->count = wc->target - 1;
		h->resync = true;
	}
	SpinLockRelease(&h->mutex);
	worker_requeue_hold(wc->hold);

	req = worker_current(wc);
	if (confirmed)
		worker_grant(wc, req, wc->sync_value);
	else if (req == NULL)
		rlock_hold_try_free(wc->hold);
	else if (acks < 0 && reply != NULL && reply->type == RLOCK_REPLY_ERROR)
		worker_complete_error(req, reply);
	else if (acks < 0)
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);
	}
	else
	{
		char		detail[RLOCK_DETAIL_LEN];

		snprintf(detail, sizeof(detail),
				 INT64_FORMAT " of the %d replicas needed confirmed it within rlock.sync_timeout (%d ms) at %s; the acquisition was undone.",
				 acks, wc->sync_need, rlock_sync_timeout,
				 rlock_conn_address(worker_hold_sync_conn(wc->hold)));
		rlock_redis_sync_failed(detail);
		worker_complete(req, RLOCK_STATUS_NOT_SYNCED, 0, detail);
	}
}

/*
 * The answer to a batch's WAIT (NULL: lost with its connection): settle
 * every acquisition of the batch that Redis granted.
 */
void
worker_sync_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	int64		acks = -1;

	worker_sync_state(conn)->wait_inflight = false;
	if (reply != NULL && reply->type == RLOCK_REPLY_INTEGER)
	{
		/* a count below zero is no confirmation */
		acks = Max(reply->integer, 0);
		rlock_redis_sync_acks(conn, (int) Min(acks, INT_MAX));
	}
	worker_sync_settle_tag(wc->sync_tag, acks, reply);
}

/*
 * Settle every grant of the batch "tag" (acks: what its WAIT answered,
 * -1 for none).
 */
static void
worker_sync_settle_tag(uint64 tag, int64 acks, const RlockReply *reply)
{
	List	   *mine = NIL;
	ListCell   *lc;

	/* settling may send nothing, but take the batch out first */
	foreach(lc, sync_granted)
	{
		WorkerCmd  *g = (WorkerCmd *) lfirst(lc);

		if (g->sync_tag == tag)
		{
			mine = lappend(mine, g);
			sync_granted = foreach_delete_current(sync_granted, lc);
		}
	}
	foreach(lc, mine)
	{
		WorkerCmd  *g = (WorkerCmd *) lfirst(lc);

		worker_sync_settle(g, acks, reply);
		pfree(g);
	}
	list_free(mine);
}

/*
 * Send the verify script over every entry of the request's owner that
 * holds something, in batches.  The batches of one sending carry its
 * number, so that a reply to an earlier sending is never counted.
 */
static void
worker_send_verify(WorkerReq *req)
{
	RlockBatcher b;
	const int  *holds;
	int			nholds;
	int			kind;
	int			i;

	req->attempt++;
	req->batches = 0;
	req->lost = 0;
	worker_set_state(req, REQ_INFLIGHT);
	nholds = rlock_owners_holds(req->owner_id, &holds);
	/* a batch is one command of one kind, on one connection */
	for (kind = 0; kind < RLOCK_NKINDS; kind++)
	{
		rlock_batcher_init(&b, WORKER_CMD_VERIFY, req->lease_ms,
						   worker_slot_of(req), req->seq, req->attempt);
		for (i = 0; i < nholds; i++)
		{
			RlockHold  *h = rlock_hold(holds[i]);
			bool		mine;
			int			generation;

			SpinLockAcquire(&h->mutex);
			mine = h->in_use && h->owner_id == req->owner_id &&
				h->kind == kind && h->count - h->to_release > 0;
			generation = (int) h->generation;
			SpinLockRelease(&h->mutex);
			if (mine)
				rlock_batcher_add(&b, holds[i], generation);
		}
		req->batches += rlock_batcher_finish(&b);
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
 * Send a request about a key, or none: EXISTS or PTTL on its key, the
 * kind's force script for FORCE, or PING for RELEASE and BARRIER
 * (answered once everything sent before it is).
 */
static void
worker_send_query(WorkerReq *req)
{
	WorkerCmd  *wc = worker_cmd_new(WORKER_CMD_QUERY);
	RlockArgs  *args = worker_args();

	switch (req->op)
	{
		case RLOCK_OP_FORCE:
			rlock_kinds[RLOCK_KIND_PLAIN]->force(args, &wc->cmd, req->key,
												 req->keylen);
			break;
		case RLOCK_OP_HOLDER:
			rlock_kinds[RLOCK_KIND_PLAIN]->holder(args, &wc->cmd, req->key,
												  req->keylen);
			break;
		case RLOCK_OP_EXISTS:
		case RLOCK_OP_PTTL:
			rlock_kinds[RLOCK_KIND_PLAIN]->probe(args, &wc->cmd, req->key,
												 req->keylen);
			break;
		default:
			rlock_args_cstr(args, "PING");
			wc->cmd.shape = RLOCK_SHAPE_PONG;
			break;
	}
	wc->slot = worker_slot_of(req);
	wc->seq = req->seq;
	wc->hold = req->hold;
	worker_set_state(req, REQ_INFLIGHT);
	if (!worker_cmd_send(worker_req_conn(req), wc, args))
		worker_make_pending(req);
}

/*
 * Send every pending request the connection can take now.  A request
 * waits while an acquire is on the wire for its entry (or, for a BARRIER,
 * for any entry of its owner): that reply may put releases ahead of it.
 */
void
worker_send_pending(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &pending)
	{
		WorkerReq  *req = dlist_container(WorkerReq, pending_node, iter.cur);

		if (!worker_req_ready(req))
			continue;
		if (req->op == RLOCK_OP_ACQUIRE ?
			worker_acquire_held_back(req) :
			(req->op == RLOCK_OP_RELEASE || req->op == RLOCK_OP_BARRIER ||
			 req->op == RLOCK_OP_VERIFY) &&
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
			continue;
		}
		dlist_delete(&req->pending_node);
		/* a resend has the rest of the request's deadline, if any */
		worker_timer_set(req, worker_unanswered_deadline(req));
		if (req->op == RLOCK_OP_ACQUIRE)
			worker_send_acquire(req);
		else if (req->op == RLOCK_OP_VERIFY)
			worker_send_verify(req);
		else
			worker_send_query(req);
	}
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
static void
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
	if (req->wait_until != 0)
		at = Min(at, req->wait_until);
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
	WorkerReq  *req = &reqs[slot];

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
 * Does the request in "slot" wait for a wake-up (neither trying nor about
 * to)?  With a key, for that key.
 */
bool
worker_waiting(int slot, const char *key, int keylen)
{
	WorkerReq  *req = &reqs[slot];
	RlockHold  *h;

	if (req->state != REQ_WAITING || req->op != RLOCK_OP_ACQUIRE)
		return false;
	if (key == NULL)
		return true;
	h = rlock_hold(req->hold);
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
	WorkerReq  *req = &reqs[slot];
	RlockHold  *h;

	if (req->state == REQ_NONE || req->op != RLOCK_OP_ACQUIRE)
		return false;
	h = rlock_hold(req->hold);
	return h->keylen == keylen && memcmp(h->key, key, keylen) == 0;
}

/*---- replies ----*/

/*
 * Mark an acquire as waiting for the lock, for the views and the process
 * title.  No wake-up: the backend looks at the mark by itself (see
 * rlock_wait_for_answer()), so that a request joining a busy key costs no
 * signal, which on a hot key would come right before the write that hands
 * the lock on.
 */
static void
worker_mark_busy(WorkerReq *req)
{
	RlockSlot  *s = rlock_slot(worker_slot_of(req));

	SpinLockAcquire(&s->mutex);
	if (s->seq == req->seq && s->state == RLOCK_SLOT_TAKEN)
		s->busy = true;
	SpinLockRelease(&s->mutex);
}

/*
 * The acquire failed because someone else holds the lock.  Wait for a
 * wake-up, bounded by the lock's TTL and the caller's deadline.  A lock
 * without expiry is looked at again every rlock.watchdog_timeout, so that
 * a missed message cannot make the wait endless.
 */
static void
worker_acquire_busy(WorkerReq *req, int64 pttl)
{
	int			slot = worker_slot_of(req);
	RlockHold  *h = rlock_hold(req->hold);
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz retry_at;

	req->handed = false;		/* someone else has it: their release wakes */
	req->told_busy = true;

	/*
	 * Redis's number, whatever it is, must not overflow a timestamp: a
	 * lease longer than a day is looked at again after a day, and a
	 * negative one Redis never gives (-1: no expiry, -2: no key) counts as
	 * ending now, whose retries the quick-retry gap bounds.
	 */
	if (pttl > RLOCK_MAX_TTL_MS)
		pttl = RLOCK_MAX_TTL_MS;
	else if (pttl < -2)
		pttl = 0;

	if (req->wait_until != 0 && now >= req->wait_until)
	{
		worker_complete(req, RLOCK_STATUS_BUSY, 0, NULL);
		return;
	}

	rlock_waiters_join(slot, h->key, h->keylen);
	rlock_waiters_busy_until(slot, h->key, h->keylen,
							 pttl > 0 ? TimestampTzPlusMilliseconds(now, pttl) :
							 pttl == -1 ?
							 TimestampTzPlusMilliseconds(now,
														 rlock_watchdog_timeout) :
							 now);	/* the lease is ending: no line */
	if (rlock_waiters_wakes(slot) != req->wakes_seen ||
		worker_release_mark(h->key, h->keylen) > req->releases_seen ||
		pttl == 0 || pttl == -2)
	{
		/*
		 * Woken, or the lock freed here, while the try was on the wire; or
		 * the lease just ended: try again now.
		 */
		worker_retry_soon(req);
		return;
	}

	req->quick_retries = 0;
	worker_set_state(req, REQ_WAITING);
	worker_mark_busy(req);
	retry_at = TimestampTzPlusMilliseconds(now, pttl > 0 ? pttl :
										   rlock_watchdog_timeout);
	if (req->wait_until != 0)
		retry_at = Min(retry_at, req->wait_until);
	worker_timer_set(req, retry_at);
}

/*
 * A script Redis no longer had: load the scripts again and retry, a
 * bounded number of times.  False when the request should rather fail.
 */
static bool
worker_noscript_retry(RlockConn *conn, WorkerReq *req, WorkerCmd *wc)
{
	if (req->noscript++ >= RLOCK_NOSCRIPT_RETRIES ||
		!rlock_scripts_reload(conn, &wc->cmd))
		return false;
	worker_make_pending(req);
	return true;
}

/*
 * The reply of an acquire: granted (maybe although the owner's earlier
 * holds were gone), or busy with the lease left (maybe with the earlier
 * holds gone).  A lost reply leaves Redis in doubt: the entry's count is
 * sent again.  An error reply needs no such care: the script fails, if at
 * all, before its first write.
 */
void
worker_acquire_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	RlockHold  *h = rlock_hold(wc->hold);
	WorkerReq  *req;
	RlockAcquired result;
	bool		newly_lost = false;
	bool		syncing;
	bool		bad_token = false;
	int64		token = 0;

	memset(&result, 0, sizeof(result));
	if (reply != NULL && reply->type != RLOCK_REPLY_ERROR &&
		!rlock_kinds[h->kind]->acquire_result(reply, &result))
	{
		worker_unknown_status(conn, wc, h->kind);
		reply = NULL;			/* as good as lost */
	}
	else if (result.granted && !wc->want_token && result.value != 0)
	{
		/* the script counts no token unless asked: Redis never says so */
		rlock_conn_fail(conn, "a grant with a fencing token nobody asked for");
		memset(&result, 0, sizeof(result));
		reply = NULL;
	}
	else if (result.granted && wc->want_token && result.value < 1)
	{
		/*
		 * INCR counts from 1: a token below that fences nothing.  Someone
		 * set the counter so (any client that may write it): the grant is
		 * undone, and the request fails with what the counter said.
		 */
		bad_token = true;
		token = result.value;
		memset(&result, 0, sizeof(result));
	}
	/* a grant that replicas must confirm waits for its WAIT */
	syncing = result.granted && wc->sync_tag != 0;

	SpinLockAcquire(&h->mutex);
	Assert(h->acquiring);
	h->acquiring = syncing;
	if (result.granted)
	{
		h->count = wc->target;
		rlock_hold_confirm(h, TimestampTzPlusMilliseconds(wc->cmd.sent_at,
														  wc->lease_ms));
	}
	if (result.lost)
		newly_lost = rlock_hold_mark_lost(h);
	else if (reply == NULL || bad_token)
		h->resync = true;		/* it may have run: restore our count */
	SpinLockRelease(&h->mutex);
	if (newly_lost)
		rlock_count(RLOCK_STAT_LOST, 1);
	/* one that never ran (a cluster did not take it) needs no fence */
	if (reply == NULL && wc->sync_tag != 0 && !wc->cmd.unsent)
		sync_lost_on[wc->hold] = conn;
	if (syncing)
	{
		MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);
		WorkerCmd  *g = palloc(sizeof(WorkerCmd));

		*g = *wc;
		g->sync_value = result.value;
		MemoryContextSwitchTo(old);
		if (conn != wc->sent_on)
		{
			/*
			 * Redirected (a Redis Cluster's MOVED or ASK): it ran on
			 * another primary, which the batch's WAIT does not ask.  It
			 * joins a batch of that connection, with a WAIT there.
			 */
			int			ask;
			int			need = rlock_redis_sync_need(conn, &ask);
			SyncConn   *sc = worker_sync_state(conn);

			if (need == 0)
			{
				/* no replica there to wait for, as for any grant there */
				g->sync_need = 0;
				worker_sync_settle(g, 0, NULL);
				pfree(g);
				return;
			}
			if (!rlock_conn_is_sync(conn))
			{
				/* no WAIT on a command connection: undone, sent again */
				worker_sync_settle(g, -1, NULL);
				pfree(g);
				return;
			}
			old = MemoryContextSwitchTo(rlock_worker_context);
			if (sc->wait_inflight && wc->cmd.send_seq < sc->wait_seq)
			{
				/* the WAIT on the wire there was sent after it: it counts */
				g->sync_tag = sc->wait_tag;
				g->sync_need = sc->wait_need;
				sync_granted = lappend(sync_granted, g);
				MemoryContextSwitchTo(old);
				return;
			}
			if (sc->batch == 0)
			{
				sc->batch = ++sync_next_tag;
				sc->need = need;
				sc->ask = ask;
				sync_batched = lappend(sync_batched, conn);
			}
			g->sync_tag = sc->batch;
			g->sync_need = sc->need;
			sync_granted = lappend(sync_granted, g);
			MemoryContextSwitchTo(old);
			return;
		}
		/* no WAIT behind it (the connection took no more): unconfirmed */
		if (wc->sync_tag == worker_sync_state(conn)->unwaited)
		{
			worker_sync_settle(g, -1, NULL);
			pfree(g);
			return;
		}
		old = MemoryContextSwitchTo(rlock_worker_context);
		sync_granted = lappend(sync_granted, g);
		MemoryContextSwitchTo(old);
		return;
	}
	worker_requeue_hold(wc->hold);

	req = worker_current(wc);
	if (req == NULL)
	{
		/* its backend gave up: hand back what Redis granted */
		if (result.granted)
			rlock_queue_release(wc->hold, 1, -1, false);
		else
			rlock_hold_try_free(wc->hold);
		return;
	}

	if (reply == NULL)
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);	/* after the resync, on a new connection */
		return;
	}
	worker_note_answered(req);
	if (bad_token)
	{
		char		detail[RLOCK_DETAIL_LEN];

		snprintf(detail, sizeof(detail),
				 "The fencing token counter of the lock gave " INT64_FORMAT ", and a token must be 1 or more (a client set the counter); the acquisition was undone.",
				 token);
		worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0, detail);
		return;
	}
	if (result.granted)
		worker_grant(wc, req, result.value);
	else if (reply->type != RLOCK_REPLY_ERROR)
		worker_acquire_busy(req, result.value);
	else if (rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT &&
			 worker_noscript_retry(conn, req, wc))
		return;
	else
		worker_complete_error(req, reply);
}

/*
 * The reply to one batch of a VERIFY request.  Lost entries are marked
 * whatever became of the request; the request is answered, with the number
 * of holds lost, when the last batch of its latest sending is in.
 */
void
worker_verify_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	int			elsewhere;
	int			lost = rlock_batch_apply(conn, wc, reply, true, NULL,
										 &elsewhere);
	WorkerReq  *req = worker_current(wc);
	int			i;

	if (req == NULL || wc->target != req->attempt)
		return;
	/* entries whose slot moved: asked again one by one, keyed, so that
	 * Redis's redirection takes each where it went; those still the same */
	for (i = 0; i < elsewhere; i++)
	{
		RlockHold  *h = rlock_hold(wc->holds[2 * i]);
		bool		same;

		SpinLockAcquire(&h->mutex);
		same = h->in_use && h->generation == (uint32) wc->holds[2 * i + 1];
		SpinLockRelease(&h->mutex);
		if (!same)
			continue;
		if (!rlock_batch_send(rlock_hold_conn(wc->holds[2 * i]),
							  WORKER_CMD_VERIFY, wc->lease_ms,
							  &wc->holds[2 * i], 1, wc->slot, wc->seq,
							  wc->target))
		{
			worker_note_unanswered(req, wc);
			worker_make_pending(req);
			return;
		}
		req->batches++;
	}
	if (reply == NULL || (lost < 0 && reply->type != RLOCK_REPLY_ERROR))
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);	/* send again on a new connection */
		return;
	}
	worker_note_answered(req);
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		if (rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT &&
			worker_noscript_retry(conn, req, wc))
			return;
		worker_complete_error(req, reply);
		return;
	}
	req->lost += lost;
	if (--req->batches == 0)
		worker_complete(req, RLOCK_STATUS_OK, req->lost, NULL);
}

/*
 * A forced release from this instance removed the lock: the local holders
 * of the key lost it, whatever rlock.verify_at_commit says.  An entry with
 * no confirmed hold is a waiter let in after the removal, or about to be:
 * it is left alone.
 */
static void
worker_force_mark_lost(const char *key, int keylen)
{
	int			newly_lost = 0;
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold  *h = rlock_hold(i);

		SpinLockAcquire(&h->mutex);
		if (h->in_use && h->count > 0 && h->keylen == keylen &&
			memcmp(h->key, key, keylen) == 0 && rlock_hold_mark_lost(h))
			newly_lost++;
		SpinLockRelease(&h->mutex);
	}
	if (newly_lost > 0)
		rlock_count(RLOCK_STAT_LOST, newly_lost);
}

void
worker_query_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	WorkerReq  *req = worker_current(wc);

	if (req == NULL)
		return;
	if (reply == NULL && req->op == RLOCK_OP_FORCE)
	{
		/*
		 * Redis may have removed the lock before the connection went.  Sent
		 * again, the removal could hit whoever took the lock since: the
		 * caller learns that the outcome is unknown instead.
		 */
		worker_complete(req, RLOCK_STATUS_CONNECTION, 0,
						"The connection to Redis was lost before it answered; the lock may or may not have been removed. rlock_holder() shows who holds it now.");
		return;
	}
	if (reply == NULL)
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);	/* harmless to ask again */
		return;
	}
	worker_note_answered(req);
	if (reply->type == RLOCK_REPLY_ERROR &&
		rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT &&
		req->op != RLOCK_OP_RELEASE && req->op != RLOCK_OP_BARRIER &&
		worker_noscript_retry(conn, req, wc))
		return;
	if (req->op == RLOCK_OP_HOLDER && reply->type != RLOCK_REPLY_ERROR)
	{
		char		text[RLOCK_DETAIL_LEN];
		int64		lease_ms;

		if (!rlock_kinds[RLOCK_KIND_PLAIN]->holder_result(reply, text,
														  sizeof(text),
														  &lease_ms))
		{
			/* a lying server: drop the connection, fail the query now */
			worker_unknown_status(conn, wc, RLOCK_KIND_PLAIN);
			worker_complete(req, RLOCK_STATUS_CONNECTION, 0,
							"Redis answered a holder query with a reply rlock does not accept.");
			return;
		}
		worker_complete(req, RLOCK_STATUS_OK, lease_ms, text);
		return;
	}
	if (reply->type == RLOCK_REPLY_ERROR)
		worker_complete_error(req, reply);
	else if (worker_release_refused_now(req))
		return;
	else if ((req->op == RLOCK_OP_RELEASE || req->op == RLOCK_OP_BARRIER) &&
			 worker_owner_busy(req, false))
		worker_set_state(req, REQ_WAITING);	/* a release goes out again */
	else if (req->op == RLOCK_OP_RELEASE)
		worker_complete(req, worker_release_status(req->hold), 0, NULL);
	else if (reply->type == RLOCK_REPLY_INTEGER)
	{
		if (req->op == RLOCK_OP_FORCE && reply->integer == 1)
			worker_force_mark_lost(req->key, req->keylen);
		worker_complete(req, RLOCK_STATUS_OK, reply->integer, NULL);
	}
	else
		worker_complete(req, RLOCK_STATUS_OK, 0, NULL);
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
			(req->key != NULL || req->hold >= 0) &&
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

		if (req->state == REQ_PENDING && req->op == RLOCK_OP_ACQUIRE &&
			req->timer_at == 0 && worker_hold_sync_conn(req->hold) == sync)
			worker_timer_set(req,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 rlock_connect_timeout));
	}
}

/*---- the ring and the timers ----*/

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
	WorkerReq	taken;
	uint32		hold_generation = 0;

	memset(&taken, 0, sizeof(taken));
	SpinLockAcquire(&s->mutex);
	s->queued = false;
	state = s->state;
	seq = s->seq;
	if (state == RLOCK_SLOT_PENDING)
	{
		s->state = RLOCK_SLOT_TAKEN;
		taken.op = s->op;
		taken.owner_id = s->owner_id;
		taken.hold = s->hold;
		hold_generation = s->hold_generation;
		taken.wait_until = s->wait_until;
		taken.lease_ms = s->lease_ms;
		taken.want_token = s->want_token;
		taken.keylen = s->keylen;
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

	if (taken.hold >= 0 && !worker_hold_count_in(taken.hold, hold_generation))
	{
		/* the entry is gone, so its backend gave the request up already */
		(void) worker_answer(slot, seq, RLOCK_STATUS_SHUTDOWN, 0,
							 "The request was given up.");
		return;
	}

	Assert(req->state == REQ_NONE);
	if (taken.hold >= 0)
		rlock_owners_note(taken.hold);
	req->seq = seq;
	req->op = taken.op;
	req->owner_id = taken.owner_id;
	req->hold = taken.hold;
	req->hold_counted = (taken.hold >= 0);
	req->wait_until = taken.wait_until;
	req->lease_ms = taken.lease_ms;
	req->want_token = taken.want_token;
	req->keylen = taken.keylen;
	req->noscript = 0;
	req->woken = false;
	req->handed = false;
	req->tried = false;
	req->line_only = false;
	req->told_busy = false;
	req->failover_since = 0;
	req->unanswered_since = 0;
	req->quick_retries = 0;
	req->last_try_at = 0;
	if (taken.keylen > 0)
	{
		/*
		 * The backend does not touch the key while the slot is TAKEN; if it
		 * gave the request up meanwhile, the copy is dropped below.
		 */
		req->key = MemoryContextAlloc(rlock_worker_context, taken.keylen + 1);
		memcpy(req->key, s->key, taken.keylen);
		req->key[taken.keylen] = '\0';
	}
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
	if (req->op != RLOCK_OP_ACQUIRE || !req->told_busy ||
		(req->wait_until != 0 && now >= req->wait_until) ||
		(worker_req_ready(req) &&
		 !worker_sync_conn_missing(worker_hold_sync_conn(req->hold))) ||
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

	if (req->wait_until != 0 && req->wait_until < at)
		at = req->wait_until;
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
			if (req->wait_until != 0 && now >= req->wait_until &&
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
