/*-------------------------------------------------------------------------
 *
 * wfg.c
 *		Deadlocks across the instances of a Redis: this instance's part of
 *		a wait-for graph kept in Redis, and the search through it
 *		(rlock.deadlock_detection = global).
 *
 * A backend finds cycles among its own instance's sessions by itself
 * (backend/deadlock.c); a holder on another instance is where its search
 * stops.  So every deadlock_timeout, while a session of this instance
 * has waited that long for a lock with the global search on, the worker
 * sends one script (wfg.lua) to the Redis node of the graph's slot, with
 *   - each such wait: the session ("<uuid>:<n>", the name of its holds in
 *     Redis), the key and mode it waits for;
 *   - each session of this instance that holds locks and has waited that
 *     long for a PostgreSQL lock, with the sessions of this instance that
 *     block it (one that never used rlock is "<uuid>:p<pid>", and its own
 *     PostgreSQL wait follows, a few steps deep);
 *   - this instance's holders of the keys the graph says someone waits
 *     for (the latest reply's list): no instance asks another who holds
 *     what, each says it of its own sessions; a Redisson client says
 *     nothing, so a path ends there;
 *   - the waits to search from.
 * The script replaces what this instance wrote the time before (entries
 * live three deadlock_timeouts, by Redis's clock), searches, and answers
 * with the keys waited for and the victims: a wait of ours on a cycle
 * found twice with every entry on it written in between (wfg.lua says
 * why that is enough).  A victim's slot is marked, with the cycle in its
 * detail, and its backend gives the request up and raises 40P01.
 *
 * Nothing waits for this: one script at a time, sent when its connection
 * is ready, skipped while the one before is unanswered; a refusal (an ACL
 * without the graph's keys, a script error) is logged once and costs
 * only the search.  Every reply is checked before use.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/wfg.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/worker_int.h"
#include "worker/scripts.h"

/* The graph's keys, in one Redis Cluster slot */
#define WFG_TAG			"rlock_wfg:{rlock_wfg}"
#define WFG_NKEYS		4

/* The most sessions a search visits; the most steps through PostgreSQL
 * waits of sessions that hold no lock; the most keys of a reply */
#define WFG_VISIT_LIMIT		1000
#define WFG_PG_STEPS		64
#define WFG_MAX_WAITED		1000

static int	script_wfg = -1;
static bool wfg_inflight = false;
static bool wfg_wrote = false;	/* entries of ours may be in Redis */
static bool wfg_refusal_logged = false;
static TimestampTz wfg_next = 0;
static TimestampTz wfg_sent_at = 0;
static bool wfg_withdraw = false;	/* a wait of ours in the graph ended */

/* The keys others wait for, from the latest reply */
static MemoryContext wfg_cxt = NULL;
static char **wfg_waited = NULL;
static int *wfg_waited_len = NULL;
static int	wfg_nwaited = 0;

/* The waits searched from in the script on the wire */
typedef struct WfgCheck
{
	uint64		owner_id;
	int			slot;
	uint64		seq;
} WfgCheck;
static WfgCheck *wfg_checks = NULL;
static int	wfg_nchecks = 0;

/* The nodes and the holds, gathered before the command is built */
static RlockArgs *wfg_nodes = NULL;
static RlockArgs *wfg_holds = NULL;

void
rlock_wfg_init(void)
{
	script_wfg = rlock_script_register("wfg", wfg_lua);
	wfg_cxt = AllocSetContextCreate(TopMemoryContext, "rlock wait-for graph",
									ALLOCSET_SMALL_SIZES);
	wfg_checks = MemoryContextAlloc(TopMemoryContext,
									rlock_shared->nslots * sizeof(WfgCheck));
	wfg_nodes = rlock_args_create(TopMemoryContext);
	wfg_holds = rlock_args_create(TopMemoryContext);
}

/* Copy every argument of "from" to the end of "to" */
static void
wfg_append(RlockArgs *to, RlockArgs *from)
{
	int			k;

	for (k = 0; k < from->argc; k++)
		rlock_args_add(to, from->buf.data + from->offsets[k], from->lens[k]);
}

/* "Process 697 of instance "db1"" */
static char *
wfg_who(int pid)
{
	char		name[RLOCK_INSTANCE_NAME_LEN];

	rlock_instance_display_name(name, sizeof(name));
	return psprintf("process %d of instance \"%s\"", pid, name);
}

/* A node's description: who, a NUL, what it waits for */
static void
wfg_add_desc(RlockArgs *args, int pid, const char *what)
{
	char	   *who = wfg_who(pid);
	int			wholen = strlen(who);
	int			whatlen = strlen(what);
	char	   *buf = palloc(wholen + whatlen + 1);

	memcpy(buf, who, wholen + 1);
	memcpy(buf + wholen + 1, what, whatlen);
	rlock_args_add(args, buf, wholen + 1 + whatlen);
}

/*
 * The node name of the session of "pid": its owner name if it has used
 * rlock (a hold entry or a request says which), else "<uuid>:p<pid>".
 */
static char *
wfg_node_of_pid(int pid, bool *owned)
{
	int			i;

	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold	h;

		rlock_hold_read(i, &h);
		if (h.in_use && h.pid == pid)
		{
			char	   *buf = palloc(RLOCK_OWNER_MAXLEN);

			rlock_owner_name(buf, h.owner_id);
			*owned = true;
			return buf;
		}
	}
	*owned = false;
	return psprintf("%s:p%d", rlock_shared->uuid, pid);
}

typedef struct WfgBuild
{
	RlockArgs  *args;
	int			nnodes;
	int			nholds;
	TimestampTz old_enough;		/* waits begun before this count */
} WfgBuild;

/*
 * The waits for locks: each a node, and a wait to search from.
 */
static void
wfg_add_lock_waits(WfgBuild *b)
{
	int			i;

	wfg_nchecks = 0;
	for (i = 0; i < rlock_shared->nslots; i++)
	{
		RlockSlot  *s = rlock_slot(i);
		bool		waits;
		RlockRequestArgs a;
		uint64		seq;
		int			pid;
		char	   *key;
		int			keylen;
		int			prefixlen;
		char		node[RLOCK_OWNER_MAXLEN];

		SpinLockAcquire(&s->mutex);
		waits = s->state == RLOCK_SLOT_TAKEN && s->busy && !s->deadlock &&
			s->args.op == RLOCK_OP_ACQUIRE && s->args.deadlock_global &&
			s->args.hold >= 0 && RLOCK_KIND_IN_FAMILY(s->args.kind) &&
			s->submitted_at <= b->old_enough;
		a = s->args;
		seq = s->seq;
		pid = s->pid;
		SpinLockRelease(&s->mutex);
		if (!waits)
			continue;
		key = rlock_hold_copy_key(a.hold, a.hold_generation, &keylen,
								  &prefixlen);
		if (key == NULL)
			continue;
		rlock_owner_name(node, a.owner_id);
		rlock_args_cstr(b->args, node);
		wfg_add_desc(b->args, pid,
					 psprintf("%sLock on %srlock \"%s\"",
							  a.mode == RLOCK_MODE_SHARED ? "Share" : "Exclusive",
							  a.kind == RLOCK_KIND_FAIR ? "fair " : "",
							  rlock_sql_key(key, keylen, prefixlen)));
		rlock_args_int(b->args, 1);
		rlock_args_add(b->args, key, keylen);
		rlock_args_cstr(b->args, a.mode == RLOCK_MODE_SHARED ? "s" : "x");
		rlock_args_int(b->args, 0);
		b->nnodes++;

		wfg_checks[wfg_nchecks].owner_id = a.owner_id;
		wfg_checks[wfg_nchecks].slot = i;
		wfg_checks[wfg_nchecks].seq = seq;
		wfg_nchecks++;
	}
}

/*
 * The PostgreSQL lock waits of sessions holding locks, and of the
 * sessions of this instance that block them, a few steps deep.
 */
static void
wfg_add_pg_waits(WfgBuild *b)
{
	int		   *todo = palloc(WFG_PG_STEPS * sizeof(int));
	int			ntodo = 0;
	int			done;
	int			i;

	for (i = 0; i < rlock_shared->nholds && ntodo < WFG_PG_STEPS; i++)
	{
		RlockHold	h;
		int			j;

		rlock_hold_read(i, &h);
		if (!h.in_use || h.nsession + h.nxact == 0)
			continue;
		for (j = 0; j < ntodo && todo[j] != h.pid; j++)
			;
		if (j == ntodo)
			todo[ntodo++] = h.pid;
	}
	for (done = 0; done < ntodo; done++)
	{
		RlockPgWait pw;
		bool		owned;
		char	   *node;
		int			j;

		if (!rlock_pg_wait(todo[done], &pw) || pw.since > b->old_enough)
			continue;
		node = wfg_node_of_pid(todo[done], &owned);
		rlock_args_cstr(b->args, node);
		wfg_add_desc(b->args, todo[done], pw.what);
		rlock_args_int(b->args, 0);
		rlock_args_int(b->args, pw.nblockers);
		for (j = 0; j < pw.nblockers; j++)
		{
			int			k;

			rlock_args_cstr(b->args, wfg_node_of_pid(pw.blockers[j], &owned));
			/* a blocker that holds no lock: what it waits for counts too */
			for (k = 0; k < ntodo && todo[k] != pw.blockers[j]; k++)
				;
			if (k == ntodo && ntodo < WFG_PG_STEPS)
				todo[ntodo++] = pw.blockers[j];
		}
		b->nnodes++;
	}
}

/* A key others wait for, and this instance's holders of it */
typedef struct WfgWaited
{
	RlockKeyRef key;			/* hash key: the key, in wfg_cxt */
	int			count;
	StringInfoData who;			/* (owner number, mode) of each holder */
} WfgWaited;

/*
 * This instance's holders of the keys others wait for: one pass over the
 * hold table, whatever the number of keys.
 */
static void
wfg_add_holds(WfgBuild *b)
{
	HTAB	   *waited;
	HASH_SEQ_STATUS seq;
	WfgWaited  *w;
	int			k;
	int			i;

	if (wfg_nwaited == 0)
		return;
	waited = rlock_keyref_table("rlock waited keys", sizeof(WfgWaited),
								CurrentMemoryContext);
	for (k = 0; k < wfg_nwaited; k++)
	{
		RlockKeyRef ref = {wfg_waited[k], wfg_waited_len[k]};
		bool		found;

		w = hash_search(waited, &ref, HASH_ENTER, &found);
		if (!found)
		{
			w->count = 0;
			initStringInfo(&w->who);
		}
	}
	for (i = 0; i < rlock_shared->nholds; i++)
	{
		RlockHold	h;
		RlockKeyRef ref;
		int			prefixlen;

		rlock_hold_read(i, &h);
		if (!h.in_use || h.nsession + h.nxact == 0 || h.lost ||
			!RLOCK_KIND_IN_FAMILY(h.kind))
			continue;
		ref.data = rlock_hold_copy_key(i, h.generation, &ref.len, &prefixlen);
		if (ref.data == NULL)
			continue;
		w = hash_search(waited, &ref, HASH_FIND, NULL);
		pfree((char *) ref.data);
		if (w == NULL)
			continue;
		/* what this read says: the slot may be another's by now */
		appendBinaryStringInfo(&w->who, (char *) &h.owner_id, sizeof(uint64));
		appendStringInfoChar(&w->who, h.mode == RLOCK_MODE_SHARED ? 's' : 'x');
		w->count++;
	}
	hash_seq_init(&seq, waited);
	while ((w = hash_seq_search(&seq)) != NULL)
	{
		if (w->count == 0)
			continue;
		rlock_args_add(b->args, w->key.data, w->key.len);
		rlock_args_int(b->args, w->count);
		for (i = 0; i < w->count; i++)
		{
			uint64		owner_id;
			char		node[RLOCK_OWNER_MAXLEN];
			const char *at = w->who.data + i * (sizeof(uint64) + 1);

			memcpy(&owner_id, at, sizeof(uint64));
			rlock_owner_name(node, owner_id);
			rlock_args_cstr(b->args, node);
			rlock_args_add(b->args, at + sizeof(uint64), 1);
		}
		b->nholds++;
	}
	hash_destroy(waited);
}

/*
 * Has a wait that the graph has from us ended (granted, run out, given
 * up)?  Its entry would stand until our next call, and a search of
 * another instance could meanwhile confirm a cycle that is gone.
 */
static bool
wfg_wait_ended(void)
{
	int			c;

	for (c = 0; c < wfg_nchecks; c++)
	{
		RlockSlot  *s = rlock_slot(wfg_checks[c].slot);
		bool		waits;

		SpinLockAcquire(&s->mutex);
		waits = s->seq == wfg_checks[c].seq &&
			s->state == RLOCK_SLOT_TAKEN && s->busy;
		SpinLockRelease(&s->mutex);
		if (!waits)
			return true;
	}
	return false;
}

void
rlock_wfg_tick(TimestampTz now)
{
	RlockConn  *conn;
	WfgBuild	b;
	RlockArgs  *nodes;
	RlockArgs  *holds;
	RlockArgs  *args;
	WorkerCmd  *wc;
	char		key[64];
	int			i;

	if (wfg_inflight || DeadlockTimeout <= 0 ||
		(!wfg_wrote && !worker_requests_waiting()))
		return;
	/* a wait that ended is withdrawn at once, at most every 10 ms */
	if (now < wfg_next)
	{
		wfg_withdraw = wfg_wrote && wfg_wait_ended();
		if (!wfg_withdraw ||
			now < TimestampTzPlusMilliseconds(wfg_sent_at, 10))
			return;
	}
	wfg_withdraw = false;
	wfg_sent_at = now;
	wfg_next = TimestampTzPlusMilliseconds(now, Max(DeadlockTimeout, 10));
	snprintf(key, sizeof(key), "%s:nodes", WFG_TAG);
	conn = rlock_redis_route(key, strlen(key));
	if (!rlock_conn_ready(conn))
		return;

	b.old_enough = TimestampTzPlusMilliseconds(now, -DeadlockTimeout);
	b.nnodes = 0;
	b.nholds = 0;
	nodes = wfg_nodes;
	rlock_args_reset(nodes);
	b.args = nodes;
	wfg_add_lock_waits(&b);
	if (wfg_nchecks > 0 || wfg_nwaited > 0)
		wfg_add_pg_waits(&b);
	holds = wfg_holds;
	rlock_args_reset(holds);
	b.args = holds;
	wfg_add_holds(&b);
	if (b.nnodes == 0 && b.nholds == 0 && !wfg_wrote)
		return;

	args = worker_args();
	rlock_args_script(args, script_wfg, WFG_NKEYS);
	rlock_args_cstr(args, key);
	rlock_args_cstr(args, WFG_TAG ":holds");
	rlock_args_cstr(args, WFG_TAG ":suspects");
	rlock_args_cstr(args, psprintf("%s:i:%s", WFG_TAG, rlock_shared->uuid));
	rlock_args_cstr(args, rlock_shared->uuid);
	rlock_args_int(args, 3 * (int64) Max(DeadlockTimeout, 10));
	rlock_args_int(args, WFG_VISIT_LIMIT);
	rlock_args_int(args, b.nnodes);
	wfg_append(args, nodes);
	rlock_args_int(args, b.nholds);
	wfg_append(args, holds);
	rlock_args_int(args, wfg_nchecks);
	for (i = 0; i < wfg_nchecks; i++)
	{
		char		node[RLOCK_OWNER_MAXLEN];

		rlock_owner_name(node, wfg_checks[i].owner_id);
		rlock_args_cstr(args, node);
	}

	wc = worker_cmd_new(WORKER_CMD_WFG);
	wc->cmd.shape = RLOCK_SHAPE_ARRAY;
	if (worker_cmd_send(conn, wc, args))
	{
		wfg_inflight = true;
		wfg_wrote = (b.nnodes + b.nholds > 0);
	}
}

/*
 * When the next call is due: never while one is on the wire, nor while no
 * request waits and nothing of ours is in Redis (a wait that begins wakes
 * the loop, which asks again).
 */
TimestampTz
rlock_wfg_next(void)
{
	if (wfg_inflight || (!wfg_wrote && !worker_requests_waiting()))
		return DT_NOEND;
	if (wfg_withdraw)
		return Min(wfg_next, TimestampTzPlusMilliseconds(wfg_sent_at, 10));
	return wfg_next;
}

/*
 * Tell the backend of a request still waiting that its wait closes a
 * deadlock: it gives the request up itself, as for a cancel.
 */
static void
wfg_mark(int slot, uint64 seq, const char *detail)
{
	RlockSlot  *s = rlock_slot(slot);
	Latch	   *latch = NULL;

	SpinLockAcquire(&s->mutex);
	if (s->seq == seq && s->state == RLOCK_SLOT_TAKEN && !s->deadlock)
	{
		strlcpy(s->detail, detail, sizeof(s->detail));
		s->deadlock = true;
		latch = s->latch;
	}
	SpinLockRelease(&s->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * A victim the script named: the session "<uuid>:<n>" of ours whose wait
 * it searched from, and the description of each wait on its cycle.
 */
static void
wfg_victim(const RlockReply *v)
{
	const RlockReply *node = v->element[0];
	uint64		owner_id;
	char	   *end;
	int			prefix = strlen(rlock_shared->uuid);
	StringInfoData detail;
	int			i;
	int			c;

	if (node->type != RLOCK_REPLY_STRING || node->len <= prefix + 1 ||
		node->len > RLOCK_OWNER_MAXLEN ||
		memcmp(node->str, rlock_shared->uuid, prefix) != 0 ||
		node->str[prefix] != ':')
		return;
	errno = 0;
	owner_id = strtou64(pnstrdup(node->str + prefix + 1,
								 node->len - prefix - 1), &end, 10);
	if (errno != 0 || *end != '\0')
		return;
	for (c = 0; c < wfg_nchecks && wfg_checks[c].owner_id != owner_id; c++)
		;
	if (c == wfg_nchecks)
		return;

	/* PostgreSQL's words: each wait, blocked by the next one's process */
	initStringInfo(&detail);
	for (i = 1; i < v->elements; i++)
	{
		const RlockReply *d = v->element[i];
		const RlockReply *next = v->element[i + 1 < v->elements ? i + 1 : 1];
		int			wholen;
		int			nextlen;

		if (d->type != RLOCK_REPLY_STRING || next->type != RLOCK_REPLY_STRING)
			return;
		wholen = strnlen(d->str, d->len);
		nextlen = strnlen(next->str, next->len);
		if (wholen == 0 || wholen == d->len)
			return;				/* not what an instance wrote */
		if (i > 1)
			appendStringInfoChar(&detail, '\n');
		appendStringInfo(&detail, "%c%.*s waits for %.*s; blocked by %.*s.",
						 pg_toupper((unsigned char) d->str[0]),
						 wholen - 1, d->str + 1,
						 d->len - wholen - 1, d->str + wholen + 1,
						 nextlen, next->str);
	}
	ereport(LOG,
			(errmsg("rlock found a deadlock across instances; the wait of the first process is given up"),
			 errdetail_internal("%s", detail.data)));
	wfg_mark(wfg_checks[c].slot, wfg_checks[c].seq, detail.data);
}

void
rlock_wfg_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	const RlockReply *waited;
	const RlockReply *victims;
	MemoryContext old;
	int			i;

	wfg_inflight = false;
	if (reply == NULL)
	{
		wfg_wrote = true;		/* maybe written: replaced next time */
		return;
	}
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		if (rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT &&
			rlock_scripts_reload(conn, &wc->cmd))
			return;
		if (!wfg_refusal_logged)
			ereport(LOG,
					(errmsg("rlock could not search for deadlocks across instances in Redis: %.*s",
							Min(reply->len, 200), reply->str),
					 errdetail("Deadlocks through sessions of other instances go undetected until Redis accepts the script.")));
		wfg_refusal_logged = true;
		return;
	}
	if (reply->elements != 2 ||
		reply->element[0]->type != RLOCK_REPLY_ARRAY ||
		reply->element[1]->type != RLOCK_REPLY_ARRAY ||
		reply->element[0]->elements > WFG_MAX_WAITED)
		return;
	waited = reply->element[0];
	victims = reply->element[1];

	/* the keys others wait for, kept until the next reply */
	MemoryContextReset(wfg_cxt);
	old = MemoryContextSwitchTo(wfg_cxt);
	wfg_waited = palloc(Max(waited->elements, 1) * sizeof(char *));
	wfg_waited_len = palloc(Max(waited->elements, 1) * sizeof(int));
	wfg_nwaited = 0;
	for (i = 0; i < waited->elements; i++)
	{
		const RlockReply *k = waited->element[i];

		if (k->type != RLOCK_REPLY_STRING || k->len == 0 ||
			k->len > rlock_max_key_length)
			continue;
		wfg_waited[wfg_nwaited] = pnstrdup(k->str, k->len);
		wfg_waited_len[wfg_nwaited] = k->len;
		wfg_nwaited++;
	}
	MemoryContextSwitchTo(old);

	for (i = 0; i < victims->elements && i < wfg_nchecks; i++)
	{
		const RlockReply *v = victims->element[i];

		if (v->type == RLOCK_REPLY_ARRAY && v->elements >= 3 &&
			v->elements <= 1 + WFG_VISIT_LIMIT)
			wfg_victim(v);
	}
}
