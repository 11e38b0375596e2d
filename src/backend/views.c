/*-------------------------------------------------------------------------
 *
 * views.c
 *		What rlock shows about itself: the locks held and waited for on
 *		this instance (rlock_locks), counters and latencies since start
 *		(rlock_stats, rlock_latency), and the worker's connections
 *		(rlock_status).
 *
 * rlock_locks is built from the shared hold table and the request slots.
 * Each entry and slot is copied under its own mutex (an entry by
 * rlock_hold_read) and the rows are built from the copy, as pg_locks does, so no lock is held while memory is
 * allocated.  Rows of sessions of other users are shown the way
 * pg_stat_activity shows them: the process and the state, but not the key
 * or anything else about the lock, unless the caller has the privileges of
 * that user or of pg_read_all_stats.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/views.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_authid_d.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "catalog/pg_type_d.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "backend/backend.h"

PG_FUNCTION_INFO_V1(rlock_locks);
PG_FUNCTION_INFO_V1(rlock_blocking_pids);
PG_FUNCTION_INFO_V1(rlock_stats);
PG_FUNCTION_INFO_V1(rlock_latency_buckets);
PG_FUNCTION_INFO_V1(rlock_stats_reset_all);
PG_FUNCTION_INFO_V1(rlock_status);

/* 13 in 1.0 to 1.4; 1.5 adds the kind, 1.6 the mode, last */
#define LOCKS_COLS		15

/* the modes' names, RLOCK_MODE_* */
static const char *const mode_names[] = {"exclusive", "shared"};

/* What rlock_locks needs of one hold entry or request slot */
typedef struct LockRow
{
	bool		waiting;		/* from a request slot */
	bool		busy;			/* slot: the lock was found busy */
	bool		session;		/* slot: the scope asked for */
	int			pid;
	Oid			userid;
	uint64		owner_id;
	uint8		kind;			/* RlockKind */
	uint8		mode;			/* RLOCK_MODE_* */
	int32		nsession;
	int32		nxact;
	int32		count;			/* the worker's count */
	bool		releasing;		/* releases queued or on the wire */
	bool		lost;
	int64		lease_ms;
	bool		renew;
	int64		token;
	TimestampTz acquired_at;
	TimestampTz expires_at;
	TimestampTz wait_started;
	TimestampTz wait_until;
	char	   *key;			/* Redis form; NULL if it could not be read */
	int			keylen;
	int			prefixlen;
} LockRow;

static Datum
views_interval_ms(int64 ms)
{
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = ms * 1000;
	return IntervalPGetDatum(iv);
}

/*
 * Emit one row of rlock_locks.  "scope" NULL means none (a release in
 * progress); count < 0 means NULL.
 */
static void
views_emit_lock(ReturnSetInfo *rsinfo, LockRow *r, const char *scope,
				int32 count, const char *state, bool visible)
{
	Datum		values[LOCKS_COLS];
	bool		nulls[LOCKS_COLS];
	char		owner[RLOCK_OWNER_MAXLEN];
	int			i = 0;

	memset(nulls, true, sizeof(nulls));

	/* key */
	if (visible && r->key != NULL)
	{
		values[i] = CStringGetTextDatum(rlock_sql_key(r->key, r->keylen, r->prefixlen));
		nulls[i] = false;
	}
	i++;
	/* scope, count, state, pid: shown to everybody */
	if (scope != NULL)
	{
		values[i] = CStringGetTextDatum(scope);
		nulls[i] = false;
	}
	i++;
	if (count >= 0)
	{
		values[i] = Int32GetDatum(count);
		nulls[i] = false;
	}
	i++;
	values[i] = CStringGetTextDatum(state);
	nulls[i++] = false;
	values[i] = Int32GetDatum(r->pid);
	nulls[i++] = false;

	if (visible)
	{
		/* owner */
		rlock_owner_name(owner, RLOCK_OWNER_FIELD(r->owner_id, r->mode));
		values[i] = CStringGetTextDatum(owner);
		nulls[i] = false;
		i++;
		/* lease, watchdog */
		if (r->lease_ms > 0)
		{
			values[i] = views_interval_ms(r->lease_ms);
			nulls[i] = false;
		}
		i++;
		values[i] = BoolGetDatum(r->renew);
		nulls[i++] = false;
		/* acquired_at, expires_at, token */
		if (r->acquired_at != 0)
		{
			values[i] = TimestampTzGetDatum(r->acquired_at);
			nulls[i] = false;
		}
		i++;
		if (r->expires_at != 0)
		{
			values[i] = TimestampTzGetDatum(r->expires_at);
			nulls[i] = false;
		}
		i++;
		if (r->token != 0)
		{
			values[i] = Int64GetDatum(r->token);
			nulls[i] = false;
		}
		i++;
		/* wait_started, wait_until */
		if (r->wait_started != 0)
		{
			values[i] = TimestampTzGetDatum(r->wait_started);
			nulls[i] = false;
		}
		i++;
		if (r->wait_until != 0)
		{
			values[i] = TimestampTzGetDatum(r->wait_until);
			nulls[i] = false;
		}
		i++;
		/* kind (1.5): its name */
		values[i] = CStringGetTextDatum(rlock_kind_names[r->kind]);
		nulls[i++] = false;
		/* mode (1.6) */
		if (r->mode < lengthof(mode_names))
		{
			values[i] = CStringGetTextDatum(mode_names[r->mode]);
			nulls[i] = false;
		}
		i++;
		Assert(i == LOCKS_COLS);
	}

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * Read hold entry "index" into a row.  False if it is not in use.
 */
static bool
views_read_hold(int index, LockRow *r)
{
	RlockHold	h;

	memset(r, 0, sizeof(LockRow));
	rlock_hold_read(index, &h);
	if (!h.in_use)
		return false;
	r->pid = h.pid;
	r->userid = h.userid;
	r->owner_id = h.owner_id;
	r->kind = h.kind;
	r->mode = h.mode;
	r->nsession = h.nsession;
	r->nxact = h.nxact;
	r->count = h.count - h.to_release;
	r->releasing = (h.to_release > 0 || h.unacked > 0 || h.resync);
	r->lost = h.lost;
	r->lease_ms = h.lease_ms;
	r->renew = h.renew;
	r->token = h.token;
	r->acquired_at = h.acquired_at;
	r->expires_at = h.expires_at;
	r->key = rlock_hold_copy_key(index, h.generation, &r->keylen,
								 &r->prefixlen);
	return r->key != NULL;
}

/*
 * Read slot "index" into a row if it carries an acquire not yet answered,
 * with the entries it takes in "pairs" (entry and generation pairs, room
 * for RLOCK_SET_MAX_KEYS of them): an acquire's one, or each key's of the
 * first round of a set, whose pairs fill the slot's key buffer (its
 * backend leaves the buffer alone while the request is pending or taken).
 * Returns how many entries; 0 for a slot with no such acquire.
 */
static int
views_read_slot(int index, LockRow *r, int *pairs)
{
	RlockSlot  *s = rlock_slot(index);
	bool		pending;
	int			n = 0;

	memset(r, 0, sizeof(LockRow));
	SpinLockAcquire(&s->mutex);
	pending = (s->state == RLOCK_SLOT_PENDING ||
			   s->state == RLOCK_SLOT_TAKEN);
	if (pending && s->args.op == RLOCK_OP_ACQUIRE && s->args.hold >= 0)
	{
		pairs[0] = s->args.hold;
		pairs[1] = (int) s->args.hold_generation;
		n = 1;
	}
	else if (pending && s->args.op == RLOCK_OP_ACQUIRE_SET &&
			 s->args.nset > 0 && s->args.nset <= RLOCK_SET_MAX_KEYS)
	{
		n = s->args.nset;
		memcpy(pairs, s->key, n * 2 * sizeof(int));
	}
	r->waiting = true;
	r->busy = s->busy;
	r->session = s->args.session;
	r->pid = s->pid;
	r->userid = s->userid;
	r->owner_id = s->args.owner_id;
	r->kind = s->args.kind;
	r->mode = s->args.mode;
	r->lease_ms = s->args.lease_ms;
	r->renew = (s->args.lease_ms == 0);
	r->wait_started = s->submitted_at;
	r->wait_until = s->args.wait_until;
	SpinLockRelease(&s->mutex);
	return n;
}

/*
 * rlock_locks(): one row per scope held by a session on a key, per entry
 * whose holds are being released, and per key of an acquire not yet
 * answered (a set's first round takes several in one request).
 */
Datum
rlock_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		see_all;
	int			i;

	rlock_check_loaded();
	InitMaterializedSRF(fcinfo, 0);
	see_all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		LockRow		r;
		bool		visible;

		if (!views_read_hold(i, &r))
			continue;
		visible = see_all || has_privs_of_role(GetUserId(), r.userid);
		if (r.nxact > 0)
			views_emit_lock(rsinfo, &r, "transaction", r.nxact,
							r.lost ? "lost" : "held", visible);
		if (r.nsession > 0)
			views_emit_lock(rsinfo, &r, "session", r.nsession,
							r.lost ? "lost" : "held", visible);
		if (r.nxact == 0 && r.nsession == 0 && (r.count > 0 || r.releasing))
		{
			r.acquired_at = 0;
			r.token = 0;
			views_emit_lock(rsinfo, &r, NULL, Max(r.count, 0), "releasing",
							visible);
		}
		pfree(r.key);
	}

	for (i = 0; i < rlock_shared->nslots; i++)
	{
		LockRow		r;
		int			pairs[2 * RLOCK_SET_MAX_KEYS];
		int			n = views_read_slot(i, &r, pairs);
		bool		visible;
		int			j;

		if (n == 0)
			continue;
		visible = see_all || has_privs_of_role(GetUserId(), r.userid);
		for (j = 0; j < n; j++)
		{
			r.key = rlock_hold_copy_key(pairs[2 * j],
										(uint32) pairs[2 * j + 1],
										&r.keylen, &r.prefixlen);
			if (r.key == NULL)
				continue;
			views_emit_lock(rsinfo, &r, r.session ? "session" : "transaction",
							-1, r.busy ? "waiting" : "acquiring", visible);
			pfree(r.key);
		}
	}
	return (Datum) 0;
}

/*
 * rlock_blocking_pids(pid): the sessions of this instance whose holds keep
 * "pid" waiting for a lock, by the rule the deadlock search follows
 * (backend/deadlock.c), as pg_blocking_pids() tells of PostgreSQL's own
 * locks.  Empty when pid waits for no lock, or only for holders elsewhere.
 */
Datum
rlock_blocking_pids(PG_FUNCTION_ARGS)
{
	int			pid = PG_GETARG_INT32(0);
	int		   *pids;
	int			n;
	Datum	   *elems;
	int			i;

	rlock_check_loaded();
	n = rlock_rlock_blockers(pid, &pids);
	elems = palloc(Max(n, 1) * sizeof(Datum));
	for (i = 0; i < n; i++)
		elems[i] = Int32GetDatum(pids[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(elems, n, INT4OID, sizeof(int32),
										  true, TYPALIGN_INT));
}

static double
views_ms(uint64 us)
{
	return (double) us / 1000.0;
}

/*
 * rlock_stats(): the counters, and the mean and maximum of each latency.
 */
Datum
rlock_stats(PG_FUNCTION_ARGS)
{
	RlockStats *st;
	TupleDesc	tupdesc;
	Datum		values[RLOCK_NCOUNTERS + 3 * RLOCK_NLATENCIES + 1];
	bool		nulls[RLOCK_NCOUNTERS + 3 * RLOCK_NLATENCIES + 1];
	int			n = 0;
	int			i;

	rlock_check_loaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	st = &rlock_shared->stats;

	memset(nulls, false, sizeof(nulls));
	/* the counters of 1.0; those added since come last */
	for (i = 0; i <= RLOCK_STAT_UNLOCK_MESSAGES; i++)
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&st->counters[i]));
	for (i = 0; i < RLOCK_NLATENCIES; i++)
	{
		RlockHistogram *hist = &st->latency[i];
		uint64		count = pg_atomic_read_u64(&hist->count);
		uint64		sum = pg_atomic_read_u64(&hist->sum_us);

		/* the acquires timed are those counted as acquired */
		if (i != RLOCK_LATENCY_ACQUIRE)
			values[n++] = Int64GetDatum((int64) count);
		if (count > 0)
			values[n] = Float8GetDatum(views_ms(sum) / count);
		else
			nulls[n] = true;
		n++;
		if (count > 0)
			values[n] = Float8GetDatum(views_ms(pg_atomic_read_u64(&hist->max_us)));
		else
			nulls[n] = true;
		n++;
	}
	values[n++] = TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&st->reset_at));
	/* the columns of 1.3, which a 1.2 definition has not */
	for (i = RLOCK_STAT_UNLOCK_MESSAGES + 1; i < RLOCK_NCOUNTERS; i++)
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&st->counters[i]));
	Assert(n == tupdesc->natts ||
		   n - (RLOCK_NCOUNTERS - RLOCK_STAT_UNLOCK_MESSAGES - 1) == tupdesc->natts);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * rlock_latency(): the histograms, one row per bucket.
 */
Datum
rlock_latency_buckets(PG_FUNCTION_ARGS)
{
	static const char *const names[RLOCK_NLATENCIES] = {
		"round_trip", "acquire"
	};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;
	int			j;

	rlock_check_loaded();
	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < RLOCK_NLATENCIES; i++)
	{
		RlockHistogram *hist = &rlock_shared->stats.latency[i];

		for (j = 0; j < RLOCK_LATENCY_BUCKETS; j++)
		{
			Datum		values[4];
			bool		nulls[4] = {false, false, false, false};

			values[0] = CStringGetTextDatum(names[i]);
			values[1] = Float8GetDatum(j == 0 ? 0.0 :
									   views_ms(rlock_latency_bounds[j - 1]));
			if (j < RLOCK_LATENCY_BUCKETS - 1)
				values[2] = Float8GetDatum(views_ms(rlock_latency_bounds[j]));
			else
				nulls[2] = true;
			values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&hist->buckets[j]));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 values, nulls);
		}
	}
	return (Datum) 0;
}

Datum
rlock_stats_reset_all(PG_FUNCTION_ARGS)
{
	rlock_check_loaded();
	rlock_stats_reset();
	PG_RETURN_VOID();
}

static const char *
views_conn_state(int state)
{
	switch ((RlockConnState) state)
	{
		case RLOCK_CONN_DOWN:
			return "down";
		case RLOCK_CONN_RESOLVING:
			return "resolving";
		case RLOCK_CONN_CONNECTING:
			return "connecting";
		case RLOCK_CONN_SECURING:
			return "securing";
		case RLOCK_CONN_HANDSHAKE:
			return "handshake";
		case RLOCK_CONN_READY:
			return "ready";
	}
	return "unknown";
}

/*
 * rlock_status(): the worker and its connections.  Connection details are
 * NULL while no worker runs.
 */
Datum
rlock_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	RlockWorkerStatus st;
	Datum		values[29];
	bool		nulls[29];
	pid_t		pid;
	int			in_use = 0;
	int			waiting = 0;
	int			i;

	rlock_check_loaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	SpinLockAcquire(&rlock_shared->mutex);
	pid = rlock_shared->worker_pid;
	SpinLockRelease(&rlock_shared->mutex);
	rlock_status_read(&st);

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold	h;

		rlock_hold_read(i, &h);
		in_use += h.in_use ? 1 : 0;
	}
	for (i = 0; i < rlock_shared->nslots; i++)
	{
		RlockSlot  *s = rlock_slot(i);

		SpinLockAcquire(&s->mutex);
		waiting += (s->args.op == RLOCK_OP_ACQUIRE && s->busy &&
					s->state == RLOCK_SLOT_TAKEN) ? 1 : 0;
		SpinLockRelease(&s->mutex);
	}

	memset(nulls, false, sizeof(nulls));
	values[0] = Int32GetDatum(pid);
	nulls[0] = (pid == 0);
	values[1] = CStringGetTextDatum(rlock_shared->uuid);
	values[2] = CStringGetTextDatum(st.address);
	nulls[2] = (st.address[0] == '\0');
	values[3] = CStringGetTextDatum(views_conn_state(st.cmd_state));
	values[4] = CStringGetTextDatum(views_conn_state(st.sub_state));
	values[5] = TimestampTzGetDatum(st.cmd_since);
	nulls[5] = (st.cmd_since == 0);
	if (pid == 0)
		nulls[3] = nulls[4] = nulls[5] = true;
	values[6] = CStringGetTextDatum(st.redis_version);
	nulls[6] = (pid == 0 || st.redis_version[0] == '\0');
	values[7] = CStringGetTextDatum(st.redis_role);
	nulls[7] = (pid == 0 || st.redis_role[0] == '\0');
	values[8] = Int32GetDatum(st.channels);
	nulls[8] = (pid == 0);
	values[9] = Int32GetDatum(in_use);
	values[10] = Int32GetDatum(rlock_shared->nholds);
	values[11] = Int32GetDatum(waiting);
	values[12] = CStringGetTextDatum(st.last_error);
	nulls[12] = (st.last_error[0] == '\0');
	values[13] = TimestampTzGetDatum(st.last_error_at);
	nulls[13] = (st.last_error_at == 0);

	/* the columns of 1.2: a 1.1 definition has only the first 14 */
	if (tupdesc->natts >= 22)
	{
		bool		sentinel = (st.topology == RLOCK_TOPOLOGY_SENTINEL);

		values[14] = CStringGetTextDatum(sentinel ? "sentinel" :
										 st.topology == RLOCK_TOPOLOGY_CLUSTER ?
										 "cluster" : "standalone");
		nulls[14] = (pid == 0);
		values[15] = CStringGetTextDatum(st.sentinel);
		nulls[15] = (pid == 0 || st.sentinel[0] == '\0');
		values[16] = Int32GetDatum(st.sentinels_known);
		values[17] = Int32GetDatum(st.sentinels_reachable);
		nulls[16] = nulls[17] = (pid == 0 || !sentinel);
		values[18] = CStringGetTextDatum(st.last_switch);
		nulls[18] = (st.last_switch[0] == '\0');
		values[19] = TimestampTzGetDatum(st.last_switch_at);
		nulls[19] = (st.last_switch_at == 0);
		values[20] = CStringGetTextDatum(st.sync_state >= 0 ?
										 views_conn_state(st.sync_state) :
										 "unused");
		nulls[20] = (pid == 0);
		values[21] = Int32GetDatum(st.replicas);
		nulls[21] = (pid == 0 || st.replicas < 0);
	}

	/* the columns of 1.3: a Redis Cluster */
	if (tupdesc->natts >= 25)
	{
		bool		cluster = (st.topology == RLOCK_TOPOLOGY_CLUSTER);

		values[22] = CStringGetTextDatum(st.cluster_node);
		nulls[22] = (pid == 0 || !cluster || st.cluster_node[0] == '\0');
		values[23] = Int32GetDatum(st.cluster_primaries);
		nulls[23] = (pid == 0 || !cluster || !st.cluster_map_known);
		values[24] = CStringGetTextDatum(st.cluster_pubsub ==
										 (RLOCK_PUBSUB_CLASSIC | RLOCK_PUBSUB_SHARDED) ?
										 "both" :
										 st.cluster_pubsub == RLOCK_PUBSUB_SHARDED ?
										 "sharded" : "classic");
		nulls[24] = (pid == 0 || !cluster);
	}

	/* the columns of 1.4: what acquisitions wait for, replicas confirming */
	if (tupdesc->natts >= 29)
	{
		values[25] = CStringGetTextDatum(st.sync_wait);
		nulls[25] = (pid == 0 || st.sync_wait[0] == '\0');
		values[26] = Int32GetDatum(st.sync_acks);
		nulls[26] = (pid == 0 || st.sync_acks < 0);
		values[27] = CStringGetTextDatum(st.sync_failure);
		nulls[27] = (st.sync_failure[0] == '\0');
		values[28] = TimestampTzGetDatum(st.sync_failure_at);
		nulls[28] = (st.sync_failure_at == 0);
	}

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
