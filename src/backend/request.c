/*-------------------------------------------------------------------------
 *
 * request.c
 *		Backend side of the request path: fill our slot, wake the worker,
 *		wait on our latch for the answer, and give up cleanly on an error.
 *
 * A backend has at most one request in flight, in the slot indexed by
 * rlock_backend_index().  While waiting it sleeps on its own latch and
 * checks for interrupts after every wake-up, so statement_timeout, lock_timeout,
 * pg_cancel_backend and pg_terminate_backend all end the wait.  Giving up
 * sets the slot back to IDLE under its mutex; if the worker had already
 * granted the lock, the grant is handed back through the release ring, and
 * if the worker grants it later, the worker hands it back itself (it sees
 * that the slot no longer waits for that request).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/request.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/ps_status.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "backend/backend.h"
#include "compat.h"

/* Owner number of this session, 0 until first used */
static uint64 my_owner_id = 0;

/* True while our slot carries a request we have not collected */
static bool request_active = false;

/* The exit callback that gives up a request is registered */
static bool exit_callback_registered = false;

static bool request_give_up(bool keep_answer);

/* Error text of the last failed request, for rlock_report_status */
static char last_detail[RLOCK_DETAIL_LEN];

/* Extra time granted to the worker beyond its own deadlines */
#define RLOCK_WORKER_GRACE_MS	1000

/* The longest single sleep of a waiting backend (WaitLatch's limit is
 * INT_MAX ms; a wait of up to RLOCK_MAX_DURATION_US takes several) */
#define RLOCK_WAIT_STEP_MS		(3600 * 1000)

/* Length of the process title before " waiting" was added, -1 if not */
static int	ps_plain_len = -1;
static char *ps_waiting = NULL;

/* The wait event a waiting session shows (compat.h) */
static uint32 wait_event = 0;

#define RLOCK_PS_SUFFIX		" waiting for rlock"

/*
 * How often a request looks for the worker's mark that the lock is busy,
 * until it has put "waiting" in the process title.  The worker sets the
 * mark without a wake-up, which on a hot key would cost a signal per
 * request, so short waits never show in the title.
 */
#define RLOCK_PS_LOOK_MS	50

/*
 * A deadlock found is looked for again this much later; only the same
 * cycle seen twice makes this session the victim (deadlock.c).
 */
#define RLOCK_DEADLOCK_CONFIRM_MS	Max(10, Min(100, DeadlockTimeout / 4))

/*
 * Add " waiting for rlock" to the process title (as a heavyweight lock
 * wait adds " waiting"), or take it off again.  Never raises once on.
 */
static void
rlock_ps_waiting(bool on)
{
	if (on)
	{
		const char *title;
		int			len;

		if (ps_plain_len >= 0 || !update_process_title)
			return;
		title = get_ps_display(&len);
		if (ps_waiting != NULL)
		{
			pfree(ps_waiting);
			ps_waiting = NULL;	/* the allocation below may fail */
		}
		ps_waiting = MemoryContextAlloc(TopMemoryContext,
										len + sizeof(RLOCK_PS_SUFFIX));
		memcpy(ps_waiting, title, len);
		strcpy(ps_waiting + len, RLOCK_PS_SUFFIX);
		set_ps_display(ps_waiting);
		ps_plain_len = len;
	}
	else if (ps_plain_len >= 0)
	{
		ps_waiting[ps_plain_len] = '\0';
		set_ps_display(ps_waiting);
		ps_plain_len = -1;
	}
}

uint64
rlock_my_owner_id(void)
{
	if (my_owner_id == 0)
		my_owner_id = pg_atomic_fetch_add_u64(&rlock_shared->next_owner_id,
											  RLOCK_OWNER_STEP);
	return my_owner_id;
}

static int
rlock_my_slot_index(void)
{
	int			index = rlock_backend_index();

	if (index < 0 || index >= rlock_shared->nslots)
		elog(ERROR, "backend number %d has no rlock request slot", index);
	return index;
}

/*
 * Give up on the request in our slot, if there is one.  Safe to call from
 * error cleanup and from the exit callback: it raises nothing and allocates
 * nothing.
 */
void
rlock_abandon_request(void)
{
	(void) request_give_up(false);
}

/*
 * Give up the request in our slot unless the worker has answered it:
 * false, and nothing changed, if it has (a deadlock victim takes a grant
 * that came first, backend/deadlock.c).  The caller raises an error next.
 */
bool
rlock_give_up_unanswered(void)
{
	return request_give_up(true);
}

/*
 * Give up the request in our slot, if there is one; with keep_answer, not
 * one the worker has answered (false then).
 */
static bool
request_give_up(bool keep_answer)
{
	int			index;
	RlockSlot  *slot;
	bool		notify;
	bool		granted;
	int			hold;
	int32		amount;
	int			nset;
	int			i;

	if (!request_active)
		return false;

	index = rlock_backend_index();
	slot = rlock_slot(index);

	SpinLockAcquire(&slot->mutex);
	if (keep_answer && slot->state == RLOCK_SLOT_DONE)
	{
		SpinLockRelease(&slot->mutex);
		return false;
	}
	request_active = false;
	granted = (slot->state == RLOCK_SLOT_DONE &&
			   (slot->args.op == RLOCK_OP_ACQUIRE ||
				slot->args.op == RLOCK_OP_ACQUIRE_SET) &&
			   slot->status == RLOCK_STATUS_OK);
	hold = slot->args.hold;
	amount = slot->args.amount;
	nset = slot->args.nset;
	/* a request the worker holds must be dropped by the worker: tell it */
	notify = (slot->state == RLOCK_SLOT_TAKEN && !slot->queued);
	if (notify)
		slot->queued = true;
	slot->state = RLOCK_SLOT_IDLE;
	SpinLockRelease(&slot->mutex);

	if (notify)
		rlock_ring_push(-1 - index);
	/*
	 * All the grant added: a semaphore's permits, one hold of a lock, one
	 * of each key of a set (the worker reads the slot's key buffer only
	 * while the slot is TAKEN: it is ours again)
	 */
	if (granted && nset == 0)
		rlock_queue_release(hold, amount, -1, false);
	for (i = 0; granted && i < nset; i++)
	{
		int			set_hold;

		memcpy(&set_hold, slot->key + 2 * i * sizeof(int), sizeof(int));
		rlock_queue_release(set_hold, 1, -1, false);
	}
	if (notify || granted)
		rlock_wake_worker();
	return true;
}

/*
 * Wait until the worker answers request "seq" in our slot.  Returns the
 * status; gives up (and says why) when the worker does not take the
 * request or does not answer within its own deadlines plus a grace period.
 */
static RlockStatus
rlock_wait_for_answer(RlockSlot *slot, uint64 seq, TimestampTz wait_until,
					  int64 *value)
{
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz take_by;
	TimestampTz answer_by;
	bool		may_show_waiting;
	TimestampTz look_at = 0;	/* the next look for a deadlock, 0: none */
	char	   *noted = NULL;	/* the cycle the latest look found */

	take_by = TimestampTzPlusMilliseconds(start, rlock_connect_timeout +
										  RLOCK_WORKER_GRACE_MS);
	if (wait_until == 0)
		answer_by = 0;
	else
		answer_by = TimestampTzPlusMilliseconds(Max(start, wait_until),
												(int64) rlock_connect_timeout +
												rlock_command_timeout +
												(rlock_sync_replicas != RLOCK_SYNC_OFF ?
												 rlock_sync_timeout : 0) +
												RLOCK_WORKER_GRACE_MS);
	/* only an acquire that may wait can be found busy */
	may_show_waiting = update_process_title &&
		slot->args.op == RLOCK_OP_ACQUIRE &&
		(wait_until == 0 || wait_until > start);
	/* a wait that lasts deadlock_timeout looks for a deadlock (deadlock.c) */
	if (rlock_deadlock_detection != RLOCK_DEADLOCK_OFF &&
		slot->args.op == RLOCK_OP_ACQUIRE &&
		RLOCK_KIND_IN_FAMILY(slot->args.kind) && DeadlockTimeout > 0)
		look_at = TimestampTzPlusMilliseconds(start, DeadlockTimeout);

	for (;;)
	{
		RlockSlotState state;
		RlockStatus status = RLOCK_STATUS_NONE;
		bool		busy;
		bool		deadlock;
		TimestampTz now;
		TimestampTz until;
		TimestampTz wake_at;
		int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;
		long		timeout = -1;

		SpinLockAcquire(&slot->mutex);
		Assert(slot->seq == seq);
		state = slot->state;
		busy = slot->busy;
		deadlock = slot->deadlock;
		if (state == RLOCK_SLOT_DONE)
		{
			status = slot->status;
			*value = slot->value;
			slot->state = RLOCK_SLOT_IDLE;
		}
		SpinLockRelease(&slot->mutex);

		if (busy && state != RLOCK_SLOT_DONE && ps_plain_len < 0)
			rlock_ps_waiting(true);

		if (state == RLOCK_SLOT_DONE)
		{
			/* the worker writes no more into an IDLE slot */
			strlcpy(last_detail, slot->detail, sizeof(last_detail));
			request_active = false;
			return status;
		}

		/* the worker found a deadlock across instances through this wait */
		if (deadlock)
			rlock_deadlock_told(slot->detail);

		now = GetCurrentTimestamp();
		until = (state == RLOCK_SLOT_PENDING) ? take_by : answer_by;
		wake_at = until;
		if (ps_plain_len < 0 && may_show_waiting)
		{
			TimestampTz look = TimestampTzPlusMilliseconds(now,
														   RLOCK_PS_LOOK_MS);

			if (wake_at == 0 || look < wake_at)
				wake_at = look;
		}
		if (until != 0 && now >= until)
		{
			rlock_abandon_request();
			if (state == RLOCK_SLOT_PENDING)
			{
				snprintf(last_detail, sizeof(last_detail),
						 "The rlock background worker did not take the request within %d ms.",
						 rlock_connect_timeout + RLOCK_WORKER_GRACE_MS);
				return RLOCK_STATUS_SHUTDOWN;
			}
			snprintf(last_detail, sizeof(last_detail),
					 "The rlock background worker did not answer in time.");
			return RLOCK_STATUS_CONNECTION;
		}
		if (look_at != 0 && now >= look_at)
		{
			char	   *found = NULL;

			/* not found busy yet: nobody it waits for, so far */
			if (busy)
				found = rlock_deadlock_look(noted);
			if (noted != NULL)
				pfree(noted);
			noted = found;
			/* a cycle is confirmed by a second look, a moment later */
			look_at = TimestampTzPlusMilliseconds(now,
												  !busy ? RLOCK_PS_LOOK_MS :
												  found != NULL ?
												  RLOCK_DEADLOCK_CONFIRM_MS :
												  DeadlockTimeout);
			continue;			/* the answer may have come meanwhile */
		}
		if (look_at != 0 && (wake_at == 0 || look_at < wake_at))
			wake_at = look_at;
		if (wake_at != 0)
		{
			/* WaitLatch takes at most INT_MAX ms: a long wait takes steps */
			events |= WL_TIMEOUT;
			timeout = (long) Min((wake_at - now + 999) / 1000,
								 RLOCK_WAIT_STEP_MS);
		}

		(void) WaitLatch(MyLatch, events, timeout,
						 rlock_wait_event(&wait_event, "Rlock"));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * before_shmem_exit callback: a session that ends (by FATAL too, which runs
 * no PG_CATCH) gives up its request, so the next session in this slot
 * finds it free.
 */
static void
rlock_request_exit(int code, Datum arg)
{
	rlock_abandon_request();
}

/*
 * Send one request to the worker and wait for its answer.
 *
 * args.hold and args.hold_generation name the hold entry for ACQUIRE and
 * RELEASE; "key" is used by the operations that have no entry.
 * args.wait_until bounds an ACQUIRE (0: no bound); args.lease_ms is its
 * lease (0: the watchdog).  With use_lock_timeout, lock_timeout applies to the wait, as
 * it does to a heavyweight lock wait.  An error or interrupt during the
 * wait gives the request up and re-throws.
 */
RlockStatus
rlock_request(const RlockRequest *req, int64 *value)
{
	int			index = rlock_my_slot_index();
	RlockSlot  *slot = rlock_slot(index);
	uint64		seq;
	bool		push;
	bool		timer = (req->use_lock_timeout && LockTimeout > 0);
	RlockStatus status;

	Assert(!request_active);
	if (!exit_callback_registered)
	{
		before_shmem_exit(rlock_request_exit, (Datum) 0);
		exit_callback_registered = true;
	}

	/* the slot is IDLE: the worker reads none of this now */
	slot->latch = MyLatch;
	slot->args = req->args;
	slot->args.owner_id = rlock_my_owner_id();
	slot->args.deadlock_global =
		(rlock_deadlock_detection == RLOCK_DEADLOCK_GLOBAL);
	slot->pid = MyProcPid;
	slot->userid = GetSessionUserId();
	slot->submitted_at = GetCurrentTimestamp();
	Assert(req->args.keylen >= 0 && req->args.keylen <= rlock_max_key_length);
	if (req->args.keylen > 0)
		memcpy(slot->key, req->key, req->args.keylen);
	slot->key[req->args.keylen] = '\0';
	/* an ACQUIRE_SET's entries, in place of a key */
	Assert(req->args.nset * 2 * sizeof(int) <= rlock_max_key_length);
	if (req->args.nset > 0)
		memcpy(slot->key, req->set, req->args.nset * 2 * sizeof(int));

	SpinLockAcquire(&slot->mutex);
	Assert(slot->state == RLOCK_SLOT_IDLE);
	seq = ++slot->seq;
	slot->busy = false;
	slot->deadlock = false;
	slot->status = RLOCK_STATUS_NONE;
	slot->value = 0;
	slot->detail[0] = '\0';
	slot->state = RLOCK_SLOT_PENDING;
	push = !slot->queued;
	slot->queued = true;
	SpinLockRelease(&slot->mutex);

	request_active = true;
	if (push)
		rlock_ring_push(-1 - index);
	rlock_wake_worker();

	PG_TRY();
	{
		if (timer)
			enable_timeout_after(LOCK_TIMEOUT, LockTimeout);
		status = rlock_wait_for_answer(slot, seq, req->args.wait_until,
									   value);
	}
	PG_CATCH();
	{
		if (timer)
			disable_timeout(LOCK_TIMEOUT, true);
		rlock_abandon_request();
		rlock_ps_waiting(false);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/*
	 * Keep the timeout's indicator, as ProcSleep does: a lock_timeout that
	 * fired as the answer came has set QueryCancelPending already, and the
	 * cancel must be reported as a lock timeout (55P03), not as a cancel
	 * by the user (57014).
	 */
	if (timer)
		disable_timeout(LOCK_TIMEOUT, true);
	rlock_ps_waiting(false);
	return status;
}

/*
 * The text the worker sent with the answer to this session's last request.
 */
const char *
rlock_last_detail(void)
{
	return last_detail;
}

/*
 * What to check when Redis refused a command, by the code its error
 * starts with.
 */
static const char *
rlock_redis_error_hint(const char *error)
{
	static const struct
	{
		const char *code;
		const char *hint;
	}			hints[] = {
		{"READONLY", "Redis at rlock.host is a read-only replica: point rlock.host at the primary."},
		{"NOPERM", "The Redis user rlock connects as (rlock.username) lacks a permission: see the ACL rules in rlock's configuration documentation."},
		{"NOAUTH", "Redis wants a password: set rlock.password_file."},
		{"WRONGTYPE", "The lock's key, or one Redisson keeps beside it (a fair lock's queue and deadlines, a read lock's timeout keys), holds another type of value than this lock kind keeps there: choose another name, or take the name with the lock kind its other users take."},
		{"OOM", "Redis is out of memory (maxmemory): free memory or raise the limit."},
		{"BUSY", "Redis is running a long script: it answers again once the script ends or is killed."},
		{"LOADING", "Redis is loading its data set: try again shortly."},
		{"MASTERDOWN", "The Redis replica lost its primary: point rlock.host at the primary."},
		{"NOREPLICAS", "The Redis primary has fewer healthy replicas than its min-replicas-to-write asks, and takes no writes: check its replicas (INFO replication)."},
	};
	int			i;

	for (i = 0; i < lengthof(hints); i++)
	{
		size_t		len = strlen(hints[i].code);

		if (strncmp(error, hints[i].code, len) == 0 &&
			(error[len] == ' ' || error[len] == '\0'))
			return hints[i].hint;
	}
	return "The detail is Redis's own error; rlock_status() shows the server and the last error.";
}

/*
 * Raise the error that goes with a failed request.  Returns for the
 * statuses that are not errors.
 */
void
rlock_report_status(RlockStatus status, const char *key, int keylen)
{
	switch (status)
	{
		case RLOCK_STATUS_NONE:
		case RLOCK_STATUS_DECLINED:
		case RLOCK_STATUS_OK:
		case RLOCK_STATUS_BUSY:
		case RLOCK_STATUS_NOT_HELD:
			return;
		case RLOCK_STATUS_CONNECTION:
			ereport(ERROR,
					(errcode(ERRCODE_IO_ERROR),
					 keylen > 0 ?
					 errmsg("could not reach Redis for lock \"%.*s\"",
							keylen, key) :
					 errmsg("could not reach Redis"),
					 last_detail[0] ? errdetail_internal("%s", last_detail) : 0,
					 errhint("Check that Redis is up and reachable with the rlock.* connection settings; rlock_status() shows the connections and the last error.")));
			break;
		case RLOCK_STATUS_REDIS_ERROR:
			ereport(ERROR,
					(errcode(ERRCODE_SYSTEM_ERROR),
					 keylen > 0 ?
					 errmsg("Redis returned an error for lock \"%.*s\"",
							keylen, key) :
					 errmsg("Redis returned an error"),
					 errdetail_internal("%s", last_detail),
					 errhint("%s", rlock_redis_error_hint(last_detail))));
			break;
		case RLOCK_STATUS_NOT_SYNCED:
			ereport(ERROR,
					(errcode(ERRCODE_IO_ERROR),
					 keylen > 0 ?
					 errmsg("Redis replicas did not confirm lock \"%.*s\" in time",
							keylen, key) :
					 errmsg("Redis replicas did not confirm the locks in time"),
					 errdetail_internal("%s", last_detail),
					 errhint("Check the replicas' links and lag (INFO replication on the primary); a superuser may raise rlock.sync_timeout or lower rlock.sync_replicas.")));
			break;
		case RLOCK_STATUS_SHUTDOWN:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("rlock background worker is not running"),
					 last_detail[0] ? errdetail_internal("%s", last_detail) : 0,
					 errhint("Check the server log for why the worker stopped.")));
			break;
	}
}
