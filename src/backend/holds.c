/*-------------------------------------------------------------------------
 *
 * holds.c
 *		The backend's own view of its holds: one local entry per key this
 *		session holds or waits for, taking, giving back and losing holds.
 *
 * Every key this session holds or waits for, in each kind and mode
 * (LocalHoldTag), has a local entry here, tied to one entry of the shared
 * hold table.  The local entry keeps the holds as a
 * stack of runs: consecutive holds of one scope, taken in one
 * subtransaction with one lease.  That is enough to mirror advisory locks
 * (xact.c ends them with the transaction, a subtransaction or, for
 * session-scoped ones, the session).  The local entries, their keys and
 * runs live in the "rlock session" memory context.
 *
 * Ending holds never waits and never raises: the count is queued on the
 * shared entry (rlock_queue_release) and the worker sends one release for
 * it.
 *
 * Losses.  When the worker sees Redis without this session's holds on a
 * key (a renewal, release or check finds the field gone, or a re-entry
 * finds the lock free or held by someone else) it marks the shared entry;
 * the session takes note the next time it touches the key, or before
 * committing.  The holds are then dropped: a lost session-scoped hold is
 * reported with a warning, a lost transaction-scoped hold makes the commit
 * (or PREPARE) fail (xact.c).
 *
 * A local entry whose holds are gone stays in the table, unpinned, until
 * the worker has freed the shared entry; taking the key again in between
 * re-pins the same shared entry, so one owner never has two entries (and
 * two opinions of its hold count) for one key.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/holds.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backend/backend_int.h"

/* The session's holds, allocated on first use */
MemoryContext rlock_session_context = NULL;
static HTAB *local_holds = NULL;
dlist_head	rlock_xact_holds = DLIST_STATIC_INIT(rlock_xact_holds);
static dlist_head idle_holds = DLIST_STATIC_INIT(idle_holds);
static int	nidle = 0;

/* Idle entries beyond this many are checked at transaction end */
#define RLOCK_IDLE_PRUNE	64

static void rlock_exit_callback(int code, Datum arg);

static uint32
local_tag_hash(const void *key, Size keysize)
{
	const LocalHoldTag *t = (const LocalHoldTag *) key;

	return hash_combine(hash_bytes((const unsigned char *) t->key.data,
								   t->key.len),
						((uint32) t->kind << 8) | t->mode);
}

static int
local_tag_match(const void *key1, const void *key2, Size keysize)
{
	const LocalHoldTag *a = (const LocalHoldTag *) key1;
	const LocalHoldTag *b = (const LocalHoldTag *) key2;

	if (a->kind != b->kind || a->mode != b->mode || a->key.len != b->key.len)
		return 1;
	return memcmp(a->key.data, b->key.data, a->key.len);
}

/*
 * Create the local table and register the callbacks, the first time this
 * session uses rlock.
 */
static void
rlock_local_init(void)
{
	HASHCTL		ctl;

	if (local_holds != NULL)
		return;

	if (rlock_session_context == NULL)
		rlock_session_context = AllocSetContextCreate(TopMemoryContext,
													  "rlock session",
													  ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(LocalHoldTag);
	ctl.entrysize = sizeof(LocalHold);
	ctl.hash = local_tag_hash;
	ctl.match = local_tag_match;
	ctl.hcxt = rlock_session_context;
	local_holds = hash_create("rlock holds", 64, &ctl,
							  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
							  HASH_CONTEXT);

	rlock_xact_register();
	before_shmem_exit(rlock_exit_callback, (Datum) 0);
}

/*
 * Has this session used rlock's holds yet?
 */
bool
rlock_local_used(void)
{
	return local_holds != NULL;
}

static LocalHold *
rlock_local_find(RlockKind kind, int mode, const char *key, int keylen)
{
	LocalHoldTag t;

	if (local_holds == NULL)
		return NULL;
	t.key.data = key;
	t.key.len = keylen;
	t.kind = (uint8) kind;
	t.mode = (uint8) mode;
	return (LocalHold *) hash_search(local_holds, &t, HASH_FIND, NULL);
}

/*
 * Find or create the local entry of a key in a kind and mode.  A new
 * entry has no shared entry yet.
 */
static LocalHold *
rlock_local_enter(RlockKind kind, int mode, const char *key, int keylen)
{
	LocalHold  *lh;
	LocalHoldTag t;
	char	   *copy;
	bool		found;

	rlock_local_init();
	lh = rlock_local_find(kind, mode, key, keylen);
	if (lh != NULL)
		return lh;

	/* copy the key first, so that inserting cannot fail half-way */
	copy = MemoryContextAlloc(rlock_session_context, keylen + 1);
	memcpy(copy, key, keylen);
	copy[keylen] = '\0';
	t.key.data = copy;
	t.key.len = keylen;
	t.kind = (uint8) kind;
	t.mode = (uint8) mode;

	lh = (LocalHold *) hash_search(local_holds, &t, HASH_ENTER, &found);
	Assert(!found);
	lh->hold = -1;
	lh->generation = 0;
	lh->pinned = false;
	lh->session_count = 0;
	lh->xact_count = 0;
	lh->acquired_at = 0;
	lh->nruns = 0;
	lh->maxruns = 0;
	lh->runs = NULL;
	dlist_push_tail(&idle_holds, &lh->idle_node);
	nidle++;
	return lh;
}

/*
 * Drop a local entry with no holds whose shared entry is gone.
 */
static void
rlock_local_remove(LocalHold *lh)
{
	char	   *keydata = (char *) lh->tag.key.data;

	Assert(!lh->pinned && lh->session_count == 0 && lh->xact_count == 0);
	dlist_delete(&lh->idle_node);
	nidle--;
	if (lh->runs != NULL)
		pfree(lh->runs);
	hash_search(local_holds, &lh->tag, HASH_REMOVE, NULL);
	pfree(keydata);
}

/*
 * Make sure the local entry has a pinned shared entry: the one it had, if
 * the worker has not freed it yet, or a new one.
 */
static void
rlock_local_pin(LocalHold *lh)
{
	int			index;
	uint32		generation;

	if (lh->pinned)
		return;

	/* every pinned entry is a key held or being taken */
	if (hash_get_num_entries(local_holds) - nidle >= rlock_max_locks_per_session)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("this session holds too many rlock locks"),
				 errdetail("rlock.max_locks_per_session allows %d keys held or being taken at once.",
						   rlock_max_locks_per_session),
				 errhint("Release locks first, or ask a superuser to raise rlock.max_locks_per_session.")));

	if (lh->hold >= 0 && rlock_hold_pin(lh->hold, lh->generation))
		index = lh->hold;
	else
	{
		/*
		 * The reserve goes by the role that runs the statement (as SET
		 * ROLE left it), not by the owner of a SECURITY DEFINER function
		 * on the way: a superuser's wrapper granted to a role must not
		 * hand that role's sessions the reserve.
		 */
		index = rlock_hold_alloc(rlock_my_owner_id(), lh->tag.kind,
								 lh->tag.mode, lh->tag.key.data,
								 lh->tag.key.len, strlen(rlock_prefix()),
								 superuser_arg(GetOuterUserId()) ? 0 :
								 rlock_superuser_reserved_locks,
								 &generation);
		if (index == RLOCK_HOLD_TABLE_RESERVED)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of rlock lock table entries"),
					 errdetail("The entries of the shared table of held locks still free are reserved for superusers (rlock.superuser_reserved_locks = %d).",
							   rlock_superuser_reserved_locks),
					 errhint("You might need to increase rlock.max_locks.")));
		if (index < 0)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of rlock lock table entries"),
					 errdetail("All %d entries of the shared table of held locks are in use.",
							   rlock_max_locks),
					 errhint("You might need to increase rlock.max_locks.")));
		lh->hold = index;
		lh->generation = generation;
	}
	lh->pinned = true;
	dlist_delete(&lh->idle_node);
	nidle--;
}

/*
 * Unpin the shared entry once the key has no holds left and no request.
 */
void
rlock_local_unpin_if_unused(LocalHold *lh)
{
	if (!lh->pinned || lh->session_count > 0 || lh->xact_count > 0)
		return;
	lh->pinned = false;
	rlock_hold_unpin(lh->hold);
	dlist_push_tail(&idle_holds, &lh->idle_node);
	nidle++;
}

/*
 * Forget idle entries whose shared entry the worker has freed.  Called at
 * transaction end when many have piled up; cheap otherwise.
 */
void
rlock_local_prune(void)
{
	dlist_mutable_iter iter;

	if (nidle <= RLOCK_IDLE_PRUNE)
		return;
	dlist_foreach_modify(iter, &idle_holds)
	{
		LocalHold  *lh = dlist_container(LocalHold, idle_node, iter.cur);
		RlockHold	h;

		if (lh->hold >= 0)
		{
			rlock_hold_read(lh->hold, &h);
			if (rlock_hold_is_current(&h, lh->generation))
				continue;
		}
		rlock_local_remove(lh);
	}
}

/*
 * Lease of the newest remaining hold, and whether any uses the watchdog.
 */
static void
rlock_local_describe(LocalHold *lh, int64 *lease_ms, bool *renew)
{
	int			i;

	*lease_ms = (lh->nruns > 0) ? lh->runs[lh->nruns - 1].lease_ms : 0;
	*renew = false;
	for (i = 0; i < lh->nruns; i++)
	{
		if (lh->runs[i].lease_ms == 0)
			*renew = true;
	}
}

/*
 * Make room for one more run, so that recording a granted hold cannot fail
 * (a grant the session failed to record would never be released).
 */
static void
rlock_local_reserve(LocalHold *lh)
{
	int			newmax;

	if (lh->nruns < lh->maxruns)
		return;
	newmax = Max(4, lh->maxruns * 2);
	if (lh->runs == NULL)
		lh->runs = MemoryContextAlloc(rlock_session_context,
									  newmax * sizeof(HoldRun));
	else
		lh->runs = repalloc(lh->runs, newmax * sizeof(HoldRun));
	lh->maxruns = newmax;
}

/*
 * The fencing token of the newest hold that asked for one, 0 if none did.
 */
static int64
rlock_local_token(LocalHold *lh)
{
	int			i;

	for (i = lh->nruns - 1; i >= 0; i--)
	{
		if (lh->runs[i].token != 0)
			return lh->runs[i].token;
	}
	return 0;
}

/*
 * The runs of an entry add up to its counts, each run holds something,
 * and an entry with holds is pinned (checked in assert-enabled builds).
 */
static void
rlock_local_check(LocalHold *lh)
{
#ifdef USE_ASSERT_CHECKING
	int32		nsession = 0;
	int32		nxact = 0;
	int			i;

	Assert(lh->nruns >= 0 && lh->nruns <= lh->maxruns);
	for (i = 0; i < lh->nruns; i++)
	{
		Assert(lh->runs[i].count > 0);
		Assert(lh->runs[i].session ==
			   (lh->runs[i].subid == InvalidSubTransactionId));
		if (lh->runs[i].session)
			nsession += lh->runs[i].count;
		else
			nxact += lh->runs[i].count;
	}
	Assert(nsession == lh->session_count && nxact == lh->xact_count);
	Assert(lh->pinned || (nsession == 0 && nxact == 0));
#endif
}

/*
 * Show the entry's holds in rlock_locks.  Never raises.
 */
static void
rlock_local_publish(LocalHold *lh)
{
	if (lh->pinned)
		rlock_hold_publish(lh->hold, lh->session_count, lh->xact_count,
						   rlock_local_token(lh), lh->acquired_at);
}

/*
 * Record a granted hold of "amount" (1 for a lock, the permits taken for a
 * semaphore), with its fencing token (0 if it asked for none).
 * Allocates nothing: rlock_local_reserve() made room before the request.
 */
static void
rlock_local_add(LocalHold *lh, bool session, int32 amount, int64 lease_ms,
				int64 token)
{
	SubTransactionId subid = session ? InvalidSubTransactionId :
	GetCurrentSubTransactionId();
	HoldRun    *top = (lh->nruns > 0) ? &lh->runs[lh->nruns - 1] : NULL;
	int64		lease;
	bool		renew;

	if (lh->session_count + lh->xact_count == 0)
		lh->acquired_at = GetCurrentTimestamp();
	if (top != NULL && top->session == session && top->subid == subid &&
		top->lease_ms == lease_ms && top->token == 0 && token == 0)
		top->count += amount;
	else
	{
		Assert(lh->nruns < lh->maxruns);
		top = &lh->runs[lh->nruns++];
		top->session = session;
		top->subid = subid;
		top->lease_ms = lease_ms;
		top->token = token;
		top->count = amount;
	}

	if (session)
		lh->session_count += amount;
	else
	{
		if (lh->xact_count == 0)
			dlist_push_tail(&rlock_xact_holds, &lh->xact_node);
		lh->xact_count += amount;
	}

	rlock_local_describe(lh, &lease, &renew);
	rlock_hold_describe(lh->hold, lease, renew);
	rlock_local_publish(lh);
	rlock_local_check(lh);
}

/*
 * Remove holds from the local entry: "max" holds of one scope, newest
 * first, or all holds of the scope when max is 0.  In transaction scope,
 * only holds taken in subtransaction "subid" count, unless subid is
 * InvalidSubTransactionId.  Returns how many were removed.
 */
int32
rlock_local_remove_holds(LocalHold *lh, bool session, SubTransactionId subid,
						 int32 max)
{
	int32		removed = 0;
	int			i;
	int			keep = 0;

	for (i = lh->nruns - 1; i >= 0 && (max == 0 || removed < max); i--)
	{
		HoldRun    *run = &lh->runs[i];
		int32		n;

		if (run->session != session)
			continue;
		if (!session && subid != InvalidSubTransactionId && run->subid != subid)
			continue;
		n = (max == 0) ? run->count : Min(run->count, max - removed);
		run->count -= n;
		removed += n;
	}

	/* squeeze out the runs that became empty */
	for (i = 0; i < lh->nruns; i++)
	{
		if (lh->runs[i].count > 0)
			lh->runs[keep++] = lh->runs[i];
	}
	lh->nruns = keep;

	if (session)
		lh->session_count -= removed;
	else if (removed > 0)
	{
		lh->xact_count -= removed;
		if (lh->xact_count == 0)
			dlist_delete(&lh->xact_node);
	}
	if (removed > 0)
		rlock_local_publish(lh);
	rlock_local_check(lh);
	return removed;
}

/*
 * Hand removed holds to the worker.  Never raises, never waits.
 */
static void
rlock_local_queue(LocalHold *lh, int32 count)
{
	int64		lease;
	bool		renew;

	if (count == 0)
		return;
	rlock_local_describe(lh, &lease, &renew);
	rlock_queue_release(lh->hold, count, lease, renew);
}

/*
 * Hand removed holds to the worker, and let the entry go if nothing is
 * left.  Never raises, never waits.
 */
void
rlock_local_give_back(LocalHold *lh, int32 count)
{
	if (count > 0)
		rlock_count(RLOCK_STAT_RELEASED, count);
	rlock_local_queue(lh, count);
	rlock_local_unpin_if_unused(lh);
}

/*
 * The subtransaction the outermost transaction-scoped hold of an entry was
 * taken in, InvalidSubTransactionId if it has none.  The holds belong to
 * subtransactions still open, which nest, and a child's id is larger than
 * its parent's.
 */
static SubTransactionId
rlock_local_outer_subid(LocalHold *lh)
{
	SubTransactionId subid = InvalidSubTransactionId;
	int			i;

	for (i = 0; i < lh->nruns; i++)
	{
		if (!lh->runs[i].session &&
			(subid == InvalidSubTransactionId || lh->runs[i].subid < subid))
			subid = lh->runs[i].subid;
	}
	return subid;
}

/*
 * If the worker found the session's holds on an entry gone since the
 * session last looked, drop them all and remember a transaction-scoped
 * loss for the check before commit.  Returns the number of holds dropped,
 * whose release the caller queues.  Allocates nothing, never raises.
 */
static int32
rlock_local_drop_lost(LocalHold *lh, int32 *nxact, int32 *nsession)
{
	SubTransactionId subid;

	*nxact = 0;
	*nsession = 0;

	/*
	 * With no holds here yet, a loss is of the grant on its way to this
	 * session: one a transfer made before Redis answered it, and then
	 * found void (worker/transfer.c).  It stays marked, to be taken once
	 * the grant is counted.
	 */
	if (!lh->pinned || lh->xact_count + lh->session_count == 0 ||
		!rlock_hold_take_loss(lh->hold))
		return 0;

	subid = rlock_local_outer_subid(lh);
	*nxact = rlock_local_remove_holds(lh, false, InvalidSubTransactionId, 0);
	*nsession = rlock_local_remove_holds(lh, true, InvalidSubTransactionId, 0);
	if (*nxact > 0)
		rlock_note_xact_loss(lh, subid);
	return *nxact + *nsession;
}

/*
 * Warn about the holds rlock_local_drop_lost() dropped, for each scope the
 * caller does not report itself.
 */
static void
rlock_local_warn_lost(LocalHold *lh, int32 nxact, int32 nsession,
					  bool warn_session, bool warn_xact)
{
	char	   *key;

	if (!(warn_session && nsession > 0) && !(warn_xact && nxact > 0))
		return;
	key = rlock_sql_key(lh->tag.key.data, lh->tag.key.len,
						strlen(rlock_prefix()));
	if (warn_session && nsession > 0)
		ereport(WARNING,
				(errmsg("session-scoped lock \"%s\" was lost", key),
				 errdetail("Its lease ran out, or it was removed from Redis, while this session held it.")));
	if (warn_xact && nxact > 0)
		ereport(WARNING,
				(errmsg("lock \"%s\" was lost by the current transaction", key),
				 errdetail("Its lease ran out, or it was removed from Redis, while this transaction held it."),
				 rlock_verify_at_commit ?
				 errhint("The transaction will fail at commit.") : 0));
	pfree(key);
}

/*
 * Take note of a loss the worker saw on this key since the session last
 * looked: drop the holds, hand their release to the worker (which brings
 * its count down), and warn about the scopes asked for.
 */
void
rlock_local_take_note(LocalHold *lh, bool warn_session, bool warn_xact)
{
	int32		nxact;
	int32		nsession;
	int32		n;

	n = rlock_local_drop_lost(lh, &nxact, &nsession);
	if (n == 0)
		return;
	rlock_local_queue(lh, n);
	rlock_wake_worker();
	rlock_local_warn_lost(lh, nxact, nsession, warn_session, warn_xact);
}

/*
 * Send a request about an entry of this session, in its kind and mode
 * (or about all of them, lh NULL, which names no kind: 0), and wait for
 * the answer.
 */
RlockStatus
rlock_hold_request(RlockOp op, LocalHold *lh, bool session, int32 amount,
				   TimestampTz wait_until, int64 lease_ms,
				   bool use_lock_timeout, bool want_token, int64 *value)
{
	RlockRequest req;

	memset(&req, 0, sizeof(req));
	req.args.op = op;
	req.args.kind = lh ? lh->tag.kind : 0;
	req.args.mode = lh ? lh->tag.mode : 0;
	req.args.session = session;
	req.args.checked = (op == RLOCK_OP_ACQUIRE && !session &&
						rlock_verify_at_commit != RLOCK_VERIFY_OFF);
	if (op == RLOCK_OP_VERIFY && rlock_verify_at_commit == RLOCK_VERIFY_ON)
		req.args.fresh_after = rlock_fresh_after(GetCurrentTimestamp());
	req.args.hold = lh ? lh->hold : -1;
	req.args.hold_generation = lh ? lh->generation : 0;
	req.args.wait_until = wait_until;
	req.args.lease_ms = lease_ms;
	req.args.amount = amount;
	req.args.want_token = want_token;
	if (op == RLOCK_OP_ACQUIRE && lh != NULL &&
		lh->tag.mode == RLOCK_MODE_EXCLUSIVE &&
		lh->session_count + lh->xact_count == 0)
	{
		LocalHold  *shared = rlock_local_find(lh->tag.kind, RLOCK_MODE_SHARED,
											  lh->tag.key.data,
											  lh->tag.key.len);

		req.args.upgrade = (shared != NULL &&
							shared->session_count + shared->xact_count > 0);
	}
	req.use_lock_timeout = use_lock_timeout;
	return rlock_request(&req, value);
}

/*
 * Count an acquire that ended in an error: lock_timeout, an interrupt
 * (statement_timeout, cancel, termination), or anything else (no free
 * entry in the lock table, out of memory).
 */
static void
rlock_count_acquire_error(int sqlerrcode)
{
	switch (sqlerrcode)
	{
		case ERRCODE_LOCK_NOT_AVAILABLE:
			rlock_count(RLOCK_STAT_TIMED_OUT, 1);
			break;
		case ERRCODE_QUERY_CANCELED:
		case ERRCODE_ADMIN_SHUTDOWN:
			rlock_count(RLOCK_STAT_CANCELLED, 1);
			break;
		default:
			rlock_count(RLOCK_STAT_FAILED, 1);
			break;
	}
}

/*
 * Take one hold of "amount" on a key in a kind and mode (1 for a lock,
 * the permits for a semaphore), waiting until wait_until (0: without
 * limit).  Returns OK when granted, BUSY when not; other statuses are
 * errors for the caller to report.
 */
RlockStatus
rlock_acquire(RlockKind kind, int mode, const char *key, int keylen,
			  bool session, int32 amount, TimestampTz wait_until,
			  int64 lease_ms, bool use_lock_timeout, bool want_token,
			  int64 *token)
{
	LocalHold  *volatile lh = rlock_local_enter(kind, mode, key, keylen);
	TimestampTz start = GetCurrentTimestamp();
	RlockStatus status;
	int64		value;

	PG_TRY();
	{
		rlock_local_pin(lh);
		rlock_local_reserve(lh);
		status = rlock_hold_request(RLOCK_OP_ACQUIRE, lh, session, amount,
									wait_until, lease_ms, use_lock_timeout,
									want_token, &value);
	}
	PG_CATCH();
	{
		rlock_count_acquire_error(geterrcode());
		rlock_local_unpin_if_unused(lh);	/* no-op if the pin failed */
		PG_RE_THROW();
	}
	PG_END_TRY();

	switch (status)
	{
		case RLOCK_STATUS_OK:
			rlock_count(RLOCK_STAT_ACQUIRED, 1);
			rlock_latency(RLOCK_LATENCY_ACQUIRE,
						  GetCurrentTimestamp() - start);
			break;
		case RLOCK_STATUS_BUSY:
			rlock_count(wait_until != 0 && wait_until <= start ?
						RLOCK_STAT_REFUSED : RLOCK_STAT_TIMED_OUT, 1);
			break;
		default:
			rlock_count(RLOCK_STAT_FAILED, 1);
			break;
	}

	if (status == RLOCK_STATUS_OK)
	{
		int32		nxact;
		int32		nsession;
		int32		dropped;

		/*
		 * A re-entry that found the lock free means the older holds were
		 * lost.  Record the grant before anything that can fail, and queue
		 * the release of the dropped holds after it, so that the release
		 * carries the new hold's lease.
		 */
		dropped = rlock_local_drop_lost(lh, &nxact, &nsession);
		rlock_local_add(lh, session, amount, lease_ms, want_token ? value : 0);
		*token = value;
		if (dropped > 0)
		{
			rlock_local_queue(lh, dropped);
			rlock_wake_worker();
			rlock_local_warn_lost(lh, nxact, nsession, true, true);
		}
		if (!session)
		{
			rlock_warn_outside_block(lh);

			/*
			 * The check goes ahead of modules that registered since the
			 * last statement end now, not only at the next one: a PL/pgSQL
			 * expression takes a lock without the executor, and a
			 * procedure's COMMIT may follow it directly.
			 */
			rlock_xact_callback_first();
		}
	}
	else
	{
		/* a re-entry may have found someone else holding the lock */
		rlock_local_take_note(lh, true, true);
		rlock_local_unpin_if_unused(lh);
	}
	return status;
}

/*
 * Take one exclusive hold on each of n keys of a kind, all or none, in one
 * command to Redis and without waiting: the first round of a set
 * (kinds/plain/multi.c).  Only for keys none of which the session holds
 * in that mode, up to RLOCK_SET_MAX_KEYS of them.  Returns OK when all
 * are held, BUSY when one is held by someone else (*busy: which, from 0)
 * and none was taken, DECLINED when the one command cannot serve the set
 * (the caller takes the keys one by one: the worker says why not); other
 * statuses are errors for the caller to report, with nothing taken.
 */
RlockStatus
rlock_acquire_set(RlockKind kind, const RlockKeyRef *keys, int n,
				  bool session, int64 lease_ms, int *busy)
{
	LocalHold **lhs;
	int		   *pairs;
	volatile int entered = 0;
	TimestampTz start = GetCurrentTimestamp();
	RlockRequest req;
	RlockStatus status;
	int64		value = 0;
	int			i;

	if (n < 2 || n > RLOCK_SET_MAX_KEYS ||
		n * 2 * sizeof(int) > rlock_max_key_length)
		return RLOCK_STATUS_DECLINED;
	for (i = 0; i < n; i++)
	{
		LocalHold  *lh = rlock_local_find(kind, RLOCK_MODE_EXCLUSIVE,
										  keys[i].data, keys[i].len);

		if (lh != NULL && lh->session_count + lh->xact_count > 0)
			return RLOCK_STATUS_DECLINED;
	}

	lhs = palloc(n * sizeof(LocalHold *));
	pairs = palloc(n * 2 * sizeof(int));
	PG_TRY();
	{
		for (i = 0; i < n; i++)
		{
			lhs[i] = rlock_local_enter(kind, RLOCK_MODE_EXCLUSIVE,
									   keys[i].data, keys[i].len);
			entered = i + 1;
			rlock_local_pin(lhs[i]);
			rlock_local_reserve(lhs[i]);
			pairs[2 * i] = lhs[i]->hold;
			pairs[2 * i + 1] = (int) lhs[i]->generation;
		}
		memset(&req, 0, sizeof(req));
		req.args.op = RLOCK_OP_ACQUIRE_SET;
		req.args.kind = kind;
		req.args.mode = RLOCK_MODE_EXCLUSIVE;
		req.args.session = session;
		req.args.checked = (!session &&
							rlock_verify_at_commit != RLOCK_VERIFY_OFF);
		req.args.hold = -1;
		req.args.wait_until = start;
		req.args.lease_ms = lease_ms;
		req.args.amount = 1;
		req.args.nset = n;
		req.set = pairs;
		status = rlock_request(&req, &value);
	}
	PG_CATCH();
	{
		rlock_count_acquire_error(geterrcode());
		for (i = 0; i < entered; i++)
			rlock_local_unpin_if_unused(lhs[i]);	/* no-op if not pinned */
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (status == RLOCK_STATUS_OK)
	{
		/* every grant recorded before anything that can fail */
		for (i = 0; i < n; i++)
			rlock_local_add(lhs[i], session, 1, lease_ms, 0);
		rlock_count(RLOCK_STAT_ACQUIRED, n);
		rlock_latency(RLOCK_LATENCY_ACQUIRE, GetCurrentTimestamp() - start);
		if (!session)
		{
			rlock_warn_outside_block(lhs[0]);
			rlock_xact_callback_first();
		}
	}
	else
	{
		for (i = 0; i < n; i++)
			rlock_local_unpin_if_unused(lhs[i]);
		if (status == RLOCK_STATUS_BUSY)
		{
			rlock_count(RLOCK_STAT_REFUSED, 1);
			*busy = (int) value;
		}
		else if (status != RLOCK_STATUS_DECLINED)
			rlock_count(RLOCK_STAT_FAILED, 1);
	}
	pfree(lhs);
	pfree(pairs);
	return status;
}

/*
 * Release the newest "amount" of one scope's holds on a key in a kind and
 * mode (1 for a lock, permits for a semaphore; the caller made sure the
 * scope holds that much) and report what Redis said about it: OK, or
 * NOT_HELD when Redis no longer had the hold.  *found is false (and
 * nothing happens) when the session has no such hold.  The release is
 * queued before the request, so it happens even if the wait for the
 * answer is interrupted.
 */
RlockStatus
rlock_release_holds(RlockKind kind, int mode, const char *key, int keylen,
					bool session, int32 amount, bool *found)
{
	LocalHold  *volatile lh = rlock_local_find(kind, mode, key, keylen);
	volatile SubTransactionId subid;
	RlockStatus status;
	int64		value;
	bool		missing;

	*found = (lh != NULL &&
			  (session ? lh->session_count : lh->xact_count) > 0);
	if (!*found)
		return RLOCK_STATUS_NONE;

	/* the entry stays pinned until the worker has answered about it */
	subid = session ? InvalidSubTransactionId : rlock_local_outer_subid(lh);
	Assert(amount > 0);
	rlock_local_queue(lh, rlock_local_remove_holds(lh, session,
												   InvalidSubTransactionId,
												   amount));
	rlock_count(RLOCK_STAT_RELEASED, 1);
	PG_TRY();
	{
		status = rlock_hold_request(RLOCK_OP_RELEASE, lh, session, 0,
									GetCurrentTimestamp(), 0, false, false,
									&value);
	}
	PG_CATCH();
	{
		/*
		 * Whether Redis still had the hold is unknown; its loss would be
		 * recorded nowhere else, so count it as lost.
		 */
		if (!session)
			rlock_note_xact_loss(lh, subid);
		rlock_local_unpin_if_unused(lh);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/*
	 * Redis did not have the hold: all holds on the key were lost, the one
	 * released included.  The caller warns about its scope (and reports
	 * an error status, which leaves the same doubt as an interruption).
	 */
	missing = (status == RLOCK_STATUS_NOT_HELD);
	if (!session && status != RLOCK_STATUS_OK)
		rlock_note_xact_loss(lh, subid);
	rlock_local_take_note(lh, !(missing && session), !(missing && !session));
	rlock_local_unpin_if_unused(lh);
	return status;
}

/*
 * Give back the newest hold of one scope on a key in a kind and mode
 * without waiting for Redis: for a caller that takes back what it has
 * just taken, in its error path too.  The worker sends the release ahead
 * of this session's next request.  False when the session has no such
 * hold.  Never raises, never waits.
 */
bool
rlock_release_nowait(RlockKind kind, int mode, const char *key, int keylen,
					 bool session)
{
	LocalHold  *lh = rlock_local_find(kind, mode, key, keylen);
	int32		n;

	if (lh == NULL)
		return false;
	n = rlock_local_remove_holds(lh, session, InvalidSubTransactionId, 1);
	rlock_local_give_back(lh, n);
	if (n > 0)
		rlock_wake_worker();
	return n > 0;
}

/*
 * Release every session-scoped hold and wait until Redis has processed the
 * releases.  Returns the number of holds released.
 */
int
rlock_release_session_all(RlockStatus *status)
{
	HASH_SEQ_STATUS seq;
	LocalHold  *lh;
	int			total = 0;
	int64		value;

	*status = RLOCK_STATUS_OK;
	if (local_holds == NULL)
		return 0;

	hash_seq_init(&seq, local_holds);
	while ((lh = (LocalHold *) hash_seq_search(&seq)) != NULL)
	{
		int32		n;

		if (lh->session_count == 0)
			continue;
		n = rlock_local_remove_holds(lh, true, InvalidSubTransactionId, 0);
		rlock_local_give_back(lh, n);
		total += n;
	}

	if (total > 0)
		*status = rlock_hold_request(RLOCK_OP_BARRIER, NULL, true, 0,
									 GetCurrentTimestamp(), 0, false, false,
									 &value);
	return total;
}

/*
 * The session's entry of a key in a kind and mode, after taking note of a
 * loss (warned about); NULL if it has none.
 */
static LocalHold *
rlock_local_noted(RlockKind kind, int mode, const char *key, int keylen)
{
	LocalHold  *lh = rlock_local_find(kind, mode, key, keylen);

	if (lh != NULL)
	{
		rlock_local_take_note(lh, true, true);
		rlock_local_unpin_if_unused(lh);
	}
	return lh;
}

/*
 * This session's hold count on a key in a kind and mode, both scopes,
 * after taking note of a loss.
 */
int
rlock_held_count(RlockKind kind, int mode, const char *key, int keylen)
{
	LocalHold  *lh = rlock_local_noted(kind, mode, key, keylen);

	return lh == NULL ? 0 : lh->session_count + lh->xact_count;
}

/*
 * This session's hold count on a key in a kind and mode in one scope,
 * after taking note of a loss.
 */
int
rlock_held_scope(RlockKind kind, int mode, const char *key, int keylen,
				 bool session)
{
	LocalHold  *lh = rlock_local_noted(kind, mode, key, keylen);

	if (lh == NULL)
		return 0;
	return session ? lh->session_count : lh->xact_count;
}

/*
 * The fencing token of this session's newest hold on a key that asked for
 * one; 0 if no hold did.
 */
int64
rlock_held_token(RlockKind kind, int mode, const char *key, int keylen)
{
	LocalHold  *lh = rlock_local_noted(kind, mode, key, keylen);

	return lh == NULL ? 0 : rlock_local_token(lh);
}

/*
 * before_shmem_exit callback: the session ends (normally, by FATAL, or by
 * pg_terminate_backend).  Give up any request and hand every hold, of both
 * scopes, back to the worker.  Registered after InitPostgres's own exit
 * callback, so it runs first: the ABORT callback that follows finds
 * nothing left to do.
 */
static void
rlock_exit_callback(int code, Datum arg)
{
	HASH_SEQ_STATUS seq;
	LocalHold  *lh;
	bool		released = false;

	rlock_abandon_request();

	hash_seq_init(&seq, local_holds);
	while ((lh = (LocalHold *) hash_seq_search(&seq)) != NULL)
	{
		int32		n;

		n = rlock_local_remove_holds(lh, true, InvalidSubTransactionId, 0);
		n += rlock_local_remove_holds(lh, false, InvalidSubTransactionId, 0);
		if (n > 0)
		{
			rlock_local_give_back(lh, n);
			released = true;
		}
		rlock_local_unpin_if_unused(lh);
	}
	if (released)
		rlock_wake_worker();
}
