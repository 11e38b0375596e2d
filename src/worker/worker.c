/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The rlock background worker: the only process that talks to Redis.
 *
 * One loop does everything.  Each pass:
 *
 *	1. advances the connections (attempts, deadlines, failures);
 *	2. drains the ring in FIFO order: hold entries with releases to send,
 *	   and slots with new (or given-up) requests;
 *	3. fires due timers: waits that ran out, TTL-bounded retries,
 *	   requests that found no connection in time, refused releases to try
 *	   again;
 *	4. sends the pending requests and, when due, the watchdog renewals;
 *	5. flushes: everything queued in this pass goes out in one write;
 *	6. sleeps on the one WaitEventSet until the latch, a socket or the next
 *	   deadline, and lets hiredis run the reply callbacks.
 *
 * A request moves PENDING -> INFLIGHT -> done, or, when the lock is busy
 * and time remains, INFLIGHT -> WAITING -> PENDING -> INFLIGHT ...  A
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
 * under it.
 *
 * The worker keeps, per hold entry, the hold count it has asked Redis to
 * hold (RlockHold.count).  Every acquire and release names that target
 * count (see scripts.c), so after a lost reply the worker can simply send
 * the entry's count again ("resync").  A grant that arrives for a request
 * its backend gave up is handed back at once.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "common/hashfn.h"
#include "lib/pairingheap.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
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
	RlockKind	kind;
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
	uint64		releases_seen;	/* releases_sent at last send */
	bool		woken;			/* retried by a wake-up, try not yet sent */
	bool		handed;			/* ACQUIRE: handed the lock by a release of
								 * this instance, and not answered yet */
	bool		tried;			/* ACQUIRE: tried, or joined the line */
	bool		line_only;		/* ACQUIRE: joined the line, never tried */
	int			noscript;		/* NOSCRIPT retries so far */
	TimestampTz timer_at;		/* 0 = no timer */
	pairingheap_node timer_node;
	dlist_node	pending_node;
} WorkerReq;

static void worker_mark_busy(WorkerReq *req);

static WorkerReq *reqs;			/* one per slot */
static int	nparked;			/* RELEASE and BARRIER requests WAITING */
static int	nwaiting;			/* ACQUIRE requests WAITING */
static pairingheap *timers;
static dlist_head pending = DLIST_STATIC_INIT(pending);
static RlockStatus *release_status; /* outcome of each entry's last release */
static char *channel_buf;		/* room for any channel name */

/*
 * Full releases this worker sent that no local waiter was handed, and
 * wake-ups that a waiter gave up without passing them on, numbered, and
 * for each of a fixed number of key hashes the number of the latest: an
 * acquire that was on the wire when this instance freed its key must not
 * sleep on its busy answer (it was not a waiter yet, so the hand-off could
 * not reach it, and the unlock message went out before it subscribed).
 * When a hand-off reached a waiter, the lock is that waiter's, and tries
 * on the wire sleep.  A hash collision only costs an early retry.
 */
#define RLOCK_RELEASE_MARKS		1024
static uint64 releases_sent = 0;
static uint64 release_marks[RLOCK_RELEASE_MARKS];

static uint64 *
worker_release_mark(const char *key, int keylen)
{
	return &release_marks[hash_bytes((const unsigned char *) key, keylen) %
						  RLOCK_RELEASE_MARKS];
}

/* Releases Redis refused for a passing reason are sent again at this time */
static TimestampTz resync_at = 0;

/* The last warning about a refused release, to repeat it only so often */
static TimestampTz release_warned_at = 0;

/* How often the lists of entries by owner shed entries let go */
#define RLOCK_SWEEP_MS			10000
static TimestampTz sweep_at = 0;

/* Retry a request whose script Redis had lost at most this often */
#define RLOCK_NOSCRIPT_RETRIES	2

/* Wait before sending again a release Redis refused */
#define RLOCK_RESYNC_DELAY_MS	1000

/* Repeat a warning about refused releases at most this often */
#define RLOCK_WARN_INTERVAL_MS	10000

/*
 * Stopping.  SIGTERM (a shutdown, or pg_terminate_backend) does not end
 * the worker at once: sessions ending in the same shutdown hand their
 * releases to it, and an explicit lease would keep a lock that nobody
 * released for its whole length.  So the worker answers every request
 * with SHUTDOWN, then keeps sending releases until none is left to send
 * or to hear about and no session pins an entry any more, for at most
 * RLOCK_STOP_PINS_MS of waiting for sessions and rlock.command_timeout in
 * all.
 */
#define RLOCK_STOP_PINS_MS		500
static volatile sig_atomic_t stop_requested = false;
static bool stopping = false;
static TimestampTz stop_pins_by = 0;
static TimestampTz stop_by = 0;

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

/*---- request bookkeeping ----*/

static inline int
worker_slot_of(WorkerReq *req)
{
	return req - reqs;
}

static void
worker_set_state(WorkerReq *req, ReqState state)
{
	bool		parked_before = (req->state == REQ_WAITING &&
								 req->op != RLOCK_OP_ACQUIRE);
	bool		parked_after = (state == REQ_WAITING &&
								req->op != RLOCK_OP_ACQUIRE);

	nparked += (int) parked_after - (int) parked_before;
	if (req->op == RLOCK_OP_ACQUIRE)
		nwaiting += (int) (state == REQ_WAITING) -
			(int) (req->state == REQ_WAITING);
	req->state = state;
}

/*
 * Put a request on the pending list.  Without a usable connection it gets
 * rlock.connect_timeout to find one.
 */
static void
worker_make_pending(WorkerReq *req)
{
	worker_set_state(req, REQ_PENDING);
	dlist_push_tail(&pending, &req->pending_node);
	if (rlock_cmd_conn()->state == RLOCK_CONN_READY)
		worker_timer_cancel(req);
	else
		worker_timer_set(req,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 rlock_connect_timeout));
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

		*worker_release_mark(h->key, h->keylen) = ++releases_sent;
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
worker_current(RlockCmd *cmd)
{
	WorkerReq  *req = &reqs[cmd->slot];

	if (req->state == REQ_INFLIGHT && req->seq == cmd->seq)
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
 * Describe why Redis cannot be reached now, for a failed request.
 */
static void
worker_connection_detail(char *buf, size_t size)
{
	RlockConn  *conn = rlock_cmd_conn();

	snprintf(buf, size, "No usable connection to Redis at %s: %s.",
			 rlock_server_address(),
			 conn->error[0] ? conn->error : "not connected");
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
 * Lease to send for a hold described by lease_ms (0 = the watchdog).
 */
static int64
worker_lease(int64 lease_ms)
{
	return lease_ms > 0 ? lease_ms : rlock_watchdog_timeout;
}

/*
 * Send the release script that leaves "target" holds of the entry in
 * Redis.  A full release hands the lock to a local waiter right behind it.
 */
static void
worker_send_release(int index, int32 target, int64 lease_ms, uint64 owner_id)
{
	RlockHold  *h = rlock_hold(index);
	RlockCmd   *cmd = rlock_cmd_new(RLOCK_CMD_RELEASE);
	char	   *channel = channel_buf;
	char		owner[RLOCK_OWNER_MAXLEN];
	char		count[24];
	char		lease[24];
	const char *argv[9];
	size_t		lens[9];

	argv[0] = "EVALSHA";
	argv[1] = rlock_script_sha(RLOCK_SCRIPT_RELEASE);
	argv[2] = "2";
	argv[3] = h->key;
	lens[3] = h->keylen;
	argv[4] = channel;
	lens[4] = rlock_channel_name(channel, h->key, h->keylen);
	argv[5] = owner;
	lens[5] = rlock_owner_name(owner, owner_id);
	argv[6] = count;
	lens[6] = snprintf(count, sizeof(count), "%d", target);
	argv[7] = lease;
	lens[7] = snprintf(lease, sizeof(lease), INT64_FORMAT,
					   worker_lease(lease_ms));
	argv[8] = "PUBLISH";
	lens[0] = 7;
	lens[1] = 40;
	lens[2] = 1;
	lens[8] = 7;

	cmd->hold = index;
	cmd->target = target;
	cmd->lease_ms = worker_lease(lease_ms);
	if (!rlock_conn_send(rlock_cmd_conn(), cmd, 9, argv, lens))
	{
		SpinLockAcquire(&h->mutex);
		h->unacked--;
		h->resync = true;
		SpinLockRelease(&h->mutex);
		return;
	}
	if (target == 0)
	{
		/*
		 * An acquire of this instance on the wire now cannot be reached by
		 * a hand-off: if none took it, such a try that meets the lock still
		 * held tries again instead of sleeping.
		 */
		cmd->index = rlock_waiters_hand_off(h->key, h->keylen);
		if (cmd->index == 0)
			*worker_release_mark(h->key, h->keylen) = ++releases_sent;
	}
}

/*
 * A hold entry came off the ring: bring Redis to the count it should hold
 * after the releases queued on it.  While an acquire for the entry is on
 * the wire nothing is sent; its reply puts the entry back on the ring.
 */
static void
worker_sync_hold(int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		send = false;
	int32		target = 0;
	int64		lease_ms = 0;
	uint64		owner_id = 0;

	rlock_owners_note(index);
	SpinLockAcquire(&h->mutex);
	h->queued = false;
	if (h->in_use && !h->acquiring)
	{
		if (h->to_release > 0)
		{
			h->count = Max(h->count - h->to_release, 0);
			h->to_release = 0;
			h->resync = true;
		}
		if (h->resync && rlock_cmd_conn()->state == RLOCK_CONN_READY)
		{
			send = true;
			h->resync = false;
			h->unacked++;
			target = h->count;
			lease_ms = h->lease_ms;
			owner_id = h->owner_id;
		}
	}
	SpinLockRelease(&h->mutex);

	if (send)
		worker_send_release(index, target, lease_ms, owner_id);
	else
		rlock_hold_try_free(index);
}

/*
 * Put an entry back on the ring if it has something to send.
 */
static void
worker_requeue_hold(int index)
{
	RlockHold  *h = rlock_hold(index);
	bool		push;

	SpinLockAcquire(&h->mutex);
	push = h->in_use && !h->queued && !h->acquiring &&
		(h->to_release > 0 || h->resync);
	if (push)
		h->queued = true;
	SpinLockRelease(&h->mutex);
	if (push)
		rlock_ring_push(index);
}

static void
worker_requeue_all_holds(void)
{
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
		worker_requeue_hold(i);
}

/*
 * RELEASE and BARRIER requests parked until the releases they cover are
 * answered: look again.
 */
static void
worker_unpark(void)
{
	int			i;

	for (i = 0; i < rlock_shared->nslots && nparked > 0; i++)
	{
		WorkerReq  *req = &reqs[i];

		if (req->state == REQ_WAITING && req->op != RLOCK_OP_ACQUIRE &&
			!worker_owner_busy(req, false))
			worker_make_pending(req);
	}
}

/*
 * Warn about a release Redis refused, at most once per interval: a Redis
 * that refuses one (out of memory, read-only replica, missing permission)
 * usually refuses them all.
 */
static void
worker_warn_release(RlockHold *h, const char *error, bool again)
{
	TimestampTz now = GetCurrentTimestamp();

	if (release_warned_at != 0 &&
		now < TimestampTzPlusMilliseconds(release_warned_at,
										  RLOCK_WARN_INTERVAL_MS))
		return;
	release_warned_at = now;
	ereport(WARNING,
			(errmsg("Redis refused to release lock \"%s\"", h->key),
			 errdetail_internal("%s", error),
			 again ? errhint("The release will be sent again.") : 0));
}

static void
worker_release_reply(RlockCmd *cmd, redisReply *reply)
{
	RlockHold  *h = rlock_hold(cmd->hold);
	RlockStatus status = RLOCK_STATUS_OK;
	bool		again = false;
	bool		later = false;
	bool		newly_lost = false;

	/* no unlock message, or maybe none, to let pass */
	if (cmd->index == RLOCK_HANDED_OFF_ECHO &&
		(reply == NULL || reply->type != REDIS_REPLY_INTEGER ||
		 reply->integer != 1))
		rlock_waiters_echo_cancel(h->key, h->keylen);

	if (reply == NULL)
		again = true;			/* outcome unknown: say it again later */
	else if (reply->type == REDIS_REPLY_NIL)
		status = RLOCK_STATUS_NOT_HELD;
	else if (reply->type == REDIS_REPLY_ERROR)
	{
		if (rlock_script_missing(reply->str))
		{
			rlock_scripts_load(rlock_cmd_conn());
			again = true;
		}
		else if (strncmp(reply->str, "WRONGTYPE", 9) == 0)
		{
			/* the key is not a lock any more: nothing of ours to release */
			status = RLOCK_STATUS_NOT_HELD;
			worker_warn_release(h, reply->str, false);
		}
		else
		{
			/* BUSY, OOM, READONLY, LOADING ...: try again in a while */
			again = later = true;
			worker_warn_release(h, reply->str, true);
		}
	}

	SpinLockAcquire(&h->mutex);
	h->unacked--;
	if (again)
		h->resync = true;
	else if (status == RLOCK_STATUS_NOT_HELD && cmd->target > 0)
		newly_lost = rlock_hold_mark_lost(h);
	else if (status == RLOCK_STATUS_OK)
		rlock_hold_confirm(h, (cmd->target > 0) ?
						   TimestampTzPlusMilliseconds(cmd->sent_at,
													   cmd->lease_ms) : 0);
	SpinLockRelease(&h->mutex);
	if (newly_lost)
		rlock_count(RLOCK_STAT_LOST, 1);

	if (!again)
		release_status[cmd->hold] = status;
	if (later)
	{
		if (resync_at == 0)
			resync_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													RLOCK_RESYNC_DELAY_MS);
	}
	else if (again && reply != NULL)
		worker_requeue_hold(cmd->hold);
	rlock_hold_try_free(cmd->hold);
	if (nparked > 0)
		worker_unpark();
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
	RlockCmd   *cmd;
	char		owner[RLOCK_OWNER_MAXLEN];
	char		count[24];
	char		lease[24];
	const char *argv[8];
	size_t		lens[8];
	int			argc = 0;
	int32		target;
	uint64		owner_id;

	/* only the worker changes count: no need to read it under the mutex */
	if (h->count == 0 && !req->tried && worker_join_line(req))
		return;

	SpinLockAcquire(&h->mutex);
	target = h->count + 1;
	owner_id = h->owner_id;
	h->acquiring = true;
	SpinLockRelease(&h->mutex);

	argv[argc] = "EVALSHA";
	lens[argc++] = 7;
	argv[argc] = rlock_script_sha(RLOCK_SCRIPT_ACQUIRE);
	lens[argc++] = 40;
	argv[argc] = req->want_token ? "2" : "1";
	lens[argc++] = 1;
	argv[argc] = h->key;
	lens[argc++] = h->keylen;
	if (req->want_token)
	{
		argv[argc] = channel_buf;
		lens[argc++] = rlock_token_name(channel_buf, h->key, h->keylen);
	}
	argv[argc] = lease;
	lens[argc++] = snprintf(lease, sizeof(lease), INT64_FORMAT,
							worker_lease(req->lease_ms));
	argv[argc] = owner;
	lens[argc++] = rlock_owner_name(owner, owner_id);
	argv[argc] = count;
	lens[argc++] = snprintf(count, sizeof(count), "%d", target);

	cmd = rlock_cmd_new(RLOCK_CMD_ACQUIRE);
	cmd->slot = slot;
	cmd->seq = req->seq;
	cmd->hold = req->hold;
	cmd->target = target;
	cmd->lease_ms = worker_lease(req->lease_ms);
	req->wakes_seen = rlock_waiters_wakes(slot);
	req->releases_seen = releases_sent;
	req->woken = false;
	req->tried = true;
	req->line_only = false;
	worker_set_state(req, REQ_INFLIGHT);
	if (!rlock_conn_send(rlock_cmd_conn(), cmd, argc, argv, lens))
	{
		SpinLockAcquire(&h->mutex);
		h->acquiring = false;
		SpinLockRelease(&h->mutex);
		worker_make_pending(req);
	}
}

/*
 * Send the verify script over every entry of the request's owner that
 * holds something, in batches.  The batches of one sending carry its
 * number, so that a reply to an earlier sending is never counted.
 */
static void
worker_send_verify(WorkerReq *req)
{
	int			pairs[2 * RLOCK_BATCH];
	int			n = 0;
	const int  *holds;
	int			nholds;
	int			i;

	req->attempt++;
	req->batches = 0;
	req->lost = 0;
	worker_set_state(req, REQ_INFLIGHT);
	nholds = rlock_owners_holds(req->owner_id, &holds);
	for (i = 0; i <= nholds; i++)
	{
		bool		mine = false;

		if (i < nholds)
		{
			RlockHold  *h = rlock_hold(holds[i]);

			SpinLockAcquire(&h->mutex);
			mine = h->in_use && h->owner_id == req->owner_id &&
				h->count - h->to_release > 0;
			pairs[2 * n] = holds[i];
			pairs[2 * n + 1] = (int) h->generation;
			SpinLockRelease(&h->mutex);
		}
		if (mine)
			n++;
		if (n == RLOCK_BATCH || (i == nholds && n > 0))
		{
			if (!rlock_batch_send(RLOCK_CMD_VERIFY, RLOCK_SCRIPT_VERIFY,
								  req->lease_ms, pairs, n,
								  worker_slot_of(req), req->seq,
								  req->attempt))
			{
				worker_make_pending(req);
				return;
			}
			req->batches++;
			n = 0;
		}
	}
	if (req->batches == 0)
		worker_complete(req, RLOCK_STATUS_OK, 0, NULL);
}

/*
 * Send a request that needs no script: EXISTS or PTTL on its key, or PING
 * for RELEASE and BARRIER (answered once everything sent before it is).
 */
static void
worker_send_query(WorkerReq *req)
{
	RlockCmd   *cmd = rlock_cmd_new(RLOCK_CMD_QUERY);
	const char *argv[2];
	size_t		lens[2];
	int			argc = 1;

	switch (req->op)
	{
		case RLOCK_OP_EXISTS:
			argv[0] = "EXISTS";
			break;
		case RLOCK_OP_PTTL:
			argv[0] = "PTTL";
			break;
		default:
			argv[0] = "PING";
			break;
	}
	lens[0] = strlen(argv[0]);
	if (req->key != NULL)
	{
		argv[1] = req->key;
		lens[1] = req->keylen;
		argc = 2;
	}
	cmd->slot = worker_slot_of(req);
	cmd->seq = req->seq;
	cmd->hold = req->hold;
	worker_set_state(req, REQ_INFLIGHT);
	if (!rlock_conn_send(rlock_cmd_conn(), cmd, argc, argv, lens))
		worker_make_pending(req);
}

/*
 * Send every pending request the connection can take now.  A request
 * waits while an acquire is on the wire for its entry (or, for a BARRIER,
 * for any entry of its owner): that reply may put releases ahead of it.
 */
static void
worker_send_pending(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &pending)
	{
		WorkerReq  *req = dlist_container(WorkerReq, pending_node, iter.cur);

		if (rlock_cmd_conn()->state != RLOCK_CONN_READY ||
			rlock_cmd_conn()->failed)
			break;
		if (req->op == RLOCK_OP_ACQUIRE ?
			worker_hold_acquiring(req->hold) :
			(req->op == RLOCK_OP_RELEASE || req->op == RLOCK_OP_BARRIER ||
			 req->op == RLOCK_OP_VERIFY) &&
			worker_owner_busy(req, true))
			continue;
		dlist_delete(&req->pending_node);
		worker_timer_cancel(req);
		if (req->op == RLOCK_OP_ACQUIRE)
			worker_send_acquire(req);
		else if (req->op == RLOCK_OP_VERIFY)
			worker_send_verify(req);
		else
			worker_send_query(req);
	}
}

/*
 * A waiting request should try again now.  False if it was not waiting
 * (its last try is still on the wire, say).  Safe inside hiredis
 * callbacks: it only moves the request to the pending list.
 */
bool
rlock_worker_retry(int slot, const char *key, int keylen)
{
	WorkerReq  *req = &reqs[slot];

	if (!rlock_worker_waiting(slot, key, keylen))
		return false;
	req->woken = true;
	req->handed = (key != NULL);
	worker_make_pending(req);
	return true;
}

/*
 * Does the request in "slot" wait for a wake-up (neither trying nor about
 * to)?  With a key, for that key.
 */
bool
rlock_worker_waiting(int slot, const char *key, int keylen)
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
		*worker_release_mark(h->key, h->keylen) > req->releases_seen ||
		pttl == 0 || pttl == -2)
	{
		/*
		 * Woken, or the lock freed here, while the try was on the wire; or
		 * the lease just ended: try again now.
		 */
		worker_make_pending(req);
		return;
	}

	worker_set_state(req, REQ_WAITING);
	worker_mark_busy(req);
	retry_at = TimestampTzPlusMilliseconds(now, pttl > 0 ? pttl :
										   rlock_watchdog_timeout);
	if (req->wait_until != 0)
		retry_at = Min(retry_at, req->wait_until);
	worker_timer_set(req, retry_at);
}

/*
 * The reply of the acquire script: {1, token} granted, {2, token} granted
 * although the owner's earlier holds were gone, {0, ttl} busy, {3, ttl}
 * busy and the owner's earlier holds gone.  A lost reply leaves Redis in
 * doubt: the entry's count is sent again.  An error reply needs no such
 * care: the script fails, if at all, before its first write.
 */
static void
worker_acquire_reply(RlockCmd *cmd, redisReply *reply)
{
	RlockHold  *h = rlock_hold(cmd->hold);
	WorkerReq  *req;
	bool		well_formed;
	int64		status = -1;
	int64		value = 0;
	bool		granted;
	bool		newly_lost = false;
	char		detail[RLOCK_DETAIL_LEN];

	well_formed = (reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
				   reply->elements == 2 &&
				   reply->element[0]->type == REDIS_REPLY_INTEGER &&
				   reply->element[1]->type == REDIS_REPLY_INTEGER);
	if (well_formed)
	{
		status = reply->element[0]->integer;
		value = reply->element[1]->integer;
	}
	granted = (status == 1 || status == 2);

	SpinLockAcquire(&h->mutex);
	h->acquiring = false;
	if (granted)
	{
		h->count = cmd->target;
		rlock_hold_confirm(h, TimestampTzPlusMilliseconds(cmd->sent_at,
														  cmd->lease_ms));
	}
	if (status == 2 || status == 3)
		newly_lost = rlock_hold_mark_lost(h);
	else if (reply == NULL)
		h->resync = true;		/* it may have run: restore our count */
	SpinLockRelease(&h->mutex);
	if (newly_lost)
		rlock_count(RLOCK_STAT_LOST, 1);
	worker_requeue_hold(cmd->hold);

	req = worker_current(cmd);
	if (req == NULL)
	{
		/* its backend gave up: hand back what Redis granted */
		if (granted)
			rlock_queue_release(cmd->hold, 1, -1, false);
		else
			rlock_hold_try_free(cmd->hold);
		return;
	}

	if (reply == NULL)
		worker_make_pending(req);	/* after the resync, on a new connection */
	else if (granted)
	{
		/* the line now waits for this grant's lease at most */
		rlock_waiters_busy_until(cmd->slot, h->key, h->keylen,
								 TimestampTzPlusMilliseconds(cmd->sent_at,
															 cmd->lease_ms));
		req->handed = false;	/* taken: its release will hand it on */
		if (!worker_answer(cmd->slot, req->seq, RLOCK_STATUS_OK, value, NULL))
			rlock_queue_release(cmd->hold, 1, -1, false);
		worker_forget(req);
	}
	else if (status == 0 || status == 3)
		worker_acquire_busy(req, value);
	else if (reply->type == REDIS_REPLY_ERROR &&
			 rlock_script_missing(reply->str) &&
			 req->noscript++ < RLOCK_NOSCRIPT_RETRIES)
	{
		rlock_scripts_load(rlock_cmd_conn());
		worker_make_pending(req);
	}
	else
	{
		if (reply->type == REDIS_REPLY_ERROR)
			strlcpy(detail, reply->str, sizeof(detail));
		else
			snprintf(detail, sizeof(detail),
					 "Unexpected reply of type %d to the acquire script.",
					 reply->type);
		worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0, detail);
	}
}

/*
 * The reply to one batch of a VERIFY request.  Lost entries are marked
 * whatever became of the request; the request is answered, with the number
 * of holds lost, when the last batch of its latest sending is in.
 */
static void
worker_verify_reply(RlockCmd *cmd, redisReply *reply)
{
	int			lost = rlock_batch_apply(cmd, reply, true, NULL);
	WorkerReq  *req = worker_current(cmd);

	if (req == NULL || cmd->target != req->attempt)
		return;
	if (reply == NULL)
		worker_make_pending(req);	/* send again on a new connection */
	else if (reply->type == REDIS_REPLY_ERROR &&
			 rlock_script_missing(reply->str) &&
			 req->noscript++ < RLOCK_NOSCRIPT_RETRIES)
	{
		rlock_scripts_load(rlock_cmd_conn());
		worker_make_pending(req);
	}
	else if (lost < 0)
		worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0,
						reply->type == REDIS_REPLY_ERROR ? reply->str :
						"Unexpected reply to the verify script.");
	else
	{
		req->lost += lost;
		if (--req->batches == 0)
			worker_complete(req, RLOCK_STATUS_OK, req->lost, NULL);
	}
}

static void
worker_query_reply(RlockCmd *cmd, redisReply *reply)
{
	WorkerReq  *req = worker_current(cmd);
	char		detail[RLOCK_DETAIL_LEN];

	if (req == NULL)
		return;
	if (reply == NULL)
		worker_make_pending(req);	/* harmless to ask again */
	else if (reply->type == REDIS_REPLY_ERROR)
	{
		strlcpy(detail, reply->str, sizeof(detail));
		worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0, detail);
	}
	else if ((req->op == RLOCK_OP_RELEASE || req->op == RLOCK_OP_BARRIER) &&
			 worker_owner_busy(req, false))
		worker_set_state(req, REQ_WAITING);	/* a release goes out again */
	else if (req->op == RLOCK_OP_RELEASE)
		worker_complete(req, release_status[req->hold], 0, NULL);
	else if (reply->type == REDIS_REPLY_INTEGER)
		worker_complete(req, RLOCK_STATUS_OK, reply->integer, NULL);
	else
		worker_complete(req, RLOCK_STATUS_OK, 0, NULL);
}

/*
 * Dispatch a reply (NULL: the connection went away first).  Runs inside
 * hiredis callbacks: raises nothing, frees no context.
 */
void
rlock_worker_reply(RlockConn *conn, RlockCmd *cmd, void *reply)
{
	redisReply *r = (redisReply *) reply;

	switch (cmd->type)
	{
		case RLOCK_CMD_ACQUIRE:
			worker_acquire_reply(cmd, r);
			break;
		case RLOCK_CMD_RELEASE:
			worker_release_reply(cmd, r);
			break;
		case RLOCK_CMD_QUERY:
			worker_query_reply(cmd, r);
			break;
		case RLOCK_CMD_RENEW:
			rlock_renew_reply(cmd, r);
			break;
		case RLOCK_CMD_VERIFY:
			worker_verify_reply(cmd, r);
			break;
		case RLOCK_CMD_SUBSCRIBE:
		case RLOCK_CMD_UNSUBSCRIBE:
			rlock_waiters_reply(cmd, r);
			break;
		case RLOCK_CMD_HANDSHAKE:
		case RLOCK_CMD_SCRIPT_LOAD:
		case RLOCK_CMD_PING:
		case RLOCK_CMD_SERVER_INFO:
			break;				/* conn.c takes care of these */
	}
}

/*
 * A connection became READY.  On the command connection, entries whose
 * count Redis may not match go back on the ring (they are sent before any
 * pending request) and the watchdog renews at once; on the subscriber, the
 * waiters' channels are subscribed again.
 */
void
rlock_worker_conn_ready(RlockConn *conn)
{
	if (conn->subscriber)
	{
		rlock_waiters_conn_ready();
		return;
	}
	worker_requeue_all_holds();
	rlock_renew_soon();
}

/*
 * A connection went away.  On the command connection, every request that
 * was pending or waiting gets rlock.connect_timeout to see it come back:
 * then it tries again (a waiter re-subscribes and retries), else it fails.
 */
void
rlock_worker_conn_lost(RlockConn *conn)
{
	int			i;

	if (conn->subscriber)
	{
		rlock_waiters_conn_lost();
		return;
	}
	/* Redis may have lost what it confirmed (a restart): commits ask */
	pg_atomic_fetch_add_u32(&rlock_shared->cmd_epoch, 1);
	for (i = 0; i < rlock_shared->nslots; i++)
	{
		WorkerReq  *req = &reqs[i];

		if (req->state == REQ_WAITING)
			worker_make_pending(req);
		else if (req->state == REQ_PENDING && req->timer_at == 0)
			worker_timer_set(req,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 rlock_connect_timeout));
	}
}

/*---- the ring and the timers ----*/

/*
 * A slot came off the ring: a new request, or one its backend gave up.
 */
static void
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
		taken.kind = s->kind;
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

	if (stopping)
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

	if (taken.hold >= 0)
		rlock_owners_note(taken.hold);
	req->seq = seq;
	req->op = taken.op;
	req->kind = taken.kind;
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
	if (taken.keylen > 0)
	{
		/*
		 * The backend does not touch the key while the slot is TAKEN; if it
		 * gave the request up meanwhile, the copy is dropped below.
		 */
		req->key = MemoryContextAlloc(TopMemoryContext, taken.keylen + 1);
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

static void
worker_drain_ring(void)
{
	int			item;

	while (rlock_ring_pop(&item))
	{
		if (item >= 0)
			worker_sync_hold(item);
		else
			worker_take_slot(-1 - item);
	}
}

static void
worker_fire_timers(TimestampTz now)
{
	if (resync_at != 0 && now >= resync_at)
	{
		resync_at = 0;
		worker_requeue_all_holds();
	}

	while (!pairingheap_is_empty(timers))
	{
		WorkerReq  *req = pairingheap_container(WorkerReq, timer_node,
												pairingheap_first(timers));
		char		detail[RLOCK_DETAIL_LEN];

		if (req->timer_at > now)
			break;
		worker_timer_cancel(req);

		if (req->state == REQ_PENDING)
		{
			worker_connection_detail(detail, sizeof(detail));
			worker_complete(req, RLOCK_STATUS_CONNECTION, 0, detail);
		}
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

static TimestampTz
worker_next_timer(void)
{
	TimestampTz next = (resync_at != 0) ? resync_at : DT_NOEND;

	if (pairingheap_is_empty(timers))
		return next;
	return Min(next, pairingheap_container(WorkerReq, timer_node,
										   pairingheap_first(timers))->timer_at);
}

/*---- start and exit ----*/

static void
worker_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	stop_requested = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * SIGTERM came: answer every request, and start the last round of
 * releases.
 */
static void
worker_begin_stop(TimestampTz now)
{
	int			i;

	stopping = true;
	stop_pins_by = TimestampTzPlusMilliseconds(now, RLOCK_STOP_PINS_MS);
	stop_by = TimestampTzPlusMilliseconds(now,
										  Max(rlock_command_timeout,
											  RLOCK_STOP_PINS_MS));
	for (i = 0; i < rlock_shared->nslots; i++)
	{
		if (reqs[i].state != REQ_NONE)
			worker_complete(&reqs[i], RLOCK_STATUS_SHUTDOWN, 0,
							"The rlock background worker exited.");
	}
}

/*
 * May the stopping worker exit: is every release sent and answered, and
 * no entry pinned by a session (one that may still hand back its holds)?
 */
static bool
worker_may_stop(TimestampTz now)
{
	int			i;

	if (now >= stop_by)
		return true;
	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold  *h = rlock_hold(i);
		bool		busy;

		SpinLockAcquire(&h->mutex);
		busy = h->in_use &&
			((h->pinned && now < stop_pins_by) ||
			 h->to_release > 0 || h->unacked > 0 || h->queued ||
			 h->acquiring ||
			 (h->resync && rlock_cmd_conn()->state == RLOCK_CONN_READY));
		SpinLockRelease(&h->mutex);
		if (busy)
			return false;
	}
	return true;
}

/*
 * A previous worker may have died with commands on the wire or entries
 * taken off the ring: their outcome is unknown, so their counts are sent
 * again once connected.  Its requests are all answered (see below), so it
 * works on none.
 */
static void
worker_recover_holds(void)
{
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold  *h = rlock_hold(i);
		bool		push = false;

		SpinLockAcquire(&h->mutex);
		h->worker_refs = 0;
		if (h->in_use &&
			(h->acquiring || h->unacked > 0 || h->to_release > 0 ||
			 h->resync || h->queued))
		{
			h->acquiring = false;
			h->unacked = 0;
			h->resync = true;
			push = !h->queued;
			h->queued = true;
		}
		SpinLockRelease(&h->mutex);
		rlock_owners_note(i);	/* sessions carry on with their holds */
		if (push)
			rlock_ring_push(i);
		else
			rlock_hold_try_free(i);
	}
}

/*
 * Answer every request a worker had taken, so that no backend waits for a
 * worker that is gone.
 */
static void
worker_answer_taken_slots(void)
{
	int			i;

	for (i = 0; i < rlock_shared->nslots; i++)
	{
		RlockSlot  *s = rlock_slot(i);
		Latch	   *latch = NULL;

		SpinLockAcquire(&s->mutex);
		if (s->state == RLOCK_SLOT_TAKEN)
		{
			s->status = RLOCK_STATUS_SHUTDOWN;
			strlcpy(s->detail, "The rlock background worker exited.",
					sizeof(s->detail));
			s->state = RLOCK_SLOT_DONE;
			latch = s->latch;
		}
		SpinLockRelease(&s->mutex);
		if (latch != NULL)
			SetLatch(latch);
	}
}

/*
 * before_shmem_exit callback of the worker.
 */
static void
worker_exit(int code, Datum arg)
{
	SpinLockAcquire(&rlock_shared->mutex);
	rlock_shared->worker_latch = NULL;
	rlock_shared->worker_pid = 0;
	SpinLockRelease(&rlock_shared->mutex);
	/* nobody watches Redis until the next worker: commits ask */
	pg_atomic_fetch_add_u32(&rlock_shared->cmd_epoch, 1);
	worker_answer_taken_slots();
}

static void
worker_init(void)
{
	int			nslots = rlock_shared->nslots;
	int			i;

	reqs = MemoryContextAllocZero(TopMemoryContext,
								  sizeof(WorkerReq) * nslots);
	for (i = 0; i < nslots; i++)
		reqs[i].hold = -1;
	release_status = MemoryContextAllocZero(TopMemoryContext,
											sizeof(RlockStatus) *
											rlock_shared->nholds);
	for (i = 0; i < rlock_shared->nholds; i++)
		release_status[i] = RLOCK_STATUS_OK;
	timers = pairingheap_allocate(worker_timer_cmp, NULL);
	channel_buf = MemoryContextAlloc(TopMemoryContext,
									 RLOCK_CHANNEL_MAXLEN(rlock_max_key_length));

	/* in case a previous worker died without its exit callback */
	worker_answer_taken_slots();
	pg_atomic_fetch_add_u32(&rlock_shared->cmd_epoch, 1);	/* its connection */
	rlock_owners_init();
	worker_recover_holds();
	rlock_waiters_init(nslots);
	rlock_conn_init();
}

void
rlock_worker_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, worker_sigterm);
	BackgroundWorkerUnblockSignals();

	/* no database: this only makes the worker visible in pg_stat_activity */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_activity(STATE_RUNNING, NULL);

	worker_init();
	before_shmem_exit(worker_exit, (Datum) 0);

	SpinLockAcquire(&rlock_shared->mutex);
	rlock_shared->worker_latch = MyLatch;
	rlock_shared->worker_pid = MyProcPid;
	SpinLockRelease(&rlock_shared->mutex);

	for (;;)
	{
		TimestampTz now;
		TimestampTz next;
		long		timeout;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			rlock_conn_reload();
		}

		now = GetCurrentTimestamp();
		if (stop_requested && !stopping)
			worker_begin_stop(now);
		if (stopping && worker_may_stop(now))
			ereport(FATAL,
					(errcode(ERRCODE_ADMIN_SHUTDOWN),
					 errmsg("terminating background worker \"%s\" due to administrator command",
							MyBgworkerEntry->bgw_type)));
		rlock_conn_keepalive(nwaiting > 0);
		rlock_conn_tick(now);
		worker_drain_ring();
		worker_fire_timers(now);
		worker_send_pending();
		rlock_renew_tick(now);
		if (now >= sweep_at)
		{
			rlock_owners_sweep();
			sweep_at = TimestampTzPlusMilliseconds(now, RLOCK_SWEEP_MS);
		}
		rlock_conn_flush();
		rlock_status_publish();

		next = Min(Min(rlock_conn_next_tick(), worker_next_timer()),
				   rlock_renew_next());
		if (stopping)
			next = Min(next, now < stop_pins_by ?
					   TimestampTzPlusMilliseconds(now, 20) : stop_by);
		if (next == DT_NOEND)
			timeout = -1;
		else
		{
			now = GetCurrentTimestamp();
			timeout = (next <= now) ? 0 : (long) ((next - now + 999) / 1000);
		}
		rlock_conn_wait(timeout);
	}
}
