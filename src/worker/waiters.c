/*-------------------------------------------------------------------------
 *
 * waiters.c
 *		Local waiters and the pub/sub subscriptions they share.
 *
 * Requests of this instance that wait for the same lock form a group keyed
 * by the lock's channel.  The group holds one subscription, made when its
 * first waiter arrives and dropped when its last one leaves, so the number
 * of subscriptions never exceeds the number of distinct busy keys.
 *
 * A group's channel, and what a message on it means, are its kind's
 * (kinds.h: channel, wake, hand_off, free_message): for the plain kind,
 * Redisson's channel, and an unlock message "0" retries one waiter, "1"
 * (read-write unlock) all of them.  A waiter whose try found the lock
 * held by another kind of lock of the family, one that publishes its
 * releases elsewhere (kinds.h: blocker_channel; a Redisson read-write
 * lock for the plain kind), listens there too: it joins that channel's
 * group as well, a blocker group, whose messages only wake; the line,
 * hand-offs and echoes are its own group's.  It stays in both until it
 * stops waiting, or a try finds the lock held by one whose release
 * publishes on the key's channel.  A request that joins the line without trying joins the
 * blocker the line's latest busy answer named, so that the line still
 * listens there when the member that got that answer leaves first.  A
 * subscription being confirmed
 * retries every waiter (the lock may have been freed while subscribing).
 * Every message also bumps the group's wake count, so a waiter whose try
 * was on the wire when the message came in tries again instead of
 * sleeping.  Messages are only hints: every waiter also has a timer
 * bounded by the lock's TTL, so a lost message costs time, never a hang.
 *
 * Subscription states move SUBSCRIBING -> SUBSCRIBED -> UNSUBSCRIBING and
 * back.  A waiter arriving while an UNSUBSCRIBE is unanswered simply
 * subscribes again.
 * Each command sent for a group is numbered, and only the confirmation of
 * the latest one changes the group's state: the confirmation of an older
 * SUBSCRIBE must not mark a channel subscribed that a later UNSUBSCRIBE
 * is about to drop.
 *
 * A waiter woken for a retry that it gives up before sending passes the
 * wake-up on to another waiter, so that no unlock message is lost.  The
 * request notes it as it ends (rlock_waiters_pass_on), and the worker's
 * loop passes it on right after the event that ended it
 * (rlock_waiters_drain): a request's completion never retries another
 * request from within.
 *
 * Local waiters form a line.  When this instance frees a key, the first
 * waiting request is retried right behind the release (hand-off; a try
 * that replicas must confirm goes on the sync connection once the release
 * is answered), and the unlock message that release publishes wakes
 * nobody when it comes back (the group counts the echoes it expects): it
 * would only send another waiter's try to fail behind the one that got
 * the lock.  A new request that may wait does not try at all while the
 * line has a member, waiting or trying: it joins at the back.  So under
 * contention between the sessions of one instance, every acquisition
 * costs one try, and waiters are served in turn.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/waiters.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/worker_int.h"

typedef enum SubState
{
	SUB_NONE,					/* not subscribed, nothing sent */
	SUB_SUBSCRIBING,			/* SUBSCRIBE sent, not confirmed */
	SUB_SUBSCRIBED,
	SUB_UNSUBSCRIBING			/* UNSUBSCRIBE sent, not confirmed */
} SubState;

typedef struct WaitGroup
{
	RlockKeyRef channel;		/* hash key; data allocated with the group */
	RlockKind	kind;			/* whose channel it is */
	SubState	state;
	dlist_head	waiters;
	int			nwaiters;
	uint64		wakes;			/* messages received on the channel */
	uint64		sent;			/* number of the latest (UN)SUBSCRIBE */
	int			echoes;			/* unlock messages of our own hand-offs
								 * still to come */
	TimestampTz refused_at;		/* Redis refused its SUBSCRIBE then, 0 if
								 * not */
	TimestampTz busy_until[2];	/* the lock's lease end, as the latest busy
								 * answer or local grant told (0: not
								 * known); [1] for a key with a brace */
	int			blocker_of[2];	/* the blocker (RlockAcquired) that answer
								 * named: where a request joining the line
								 * listens too (0: the kind's channel) */
	RlockConn  *conn;			/* where its subscription was made */
	int			pubsub;			/* with which RLOCK_PUBSUB_* namespaces */
	int			inflight;		/* its (un)subscribe commands on the wire,
								 * which point at it: it lives until they
								 * are answered */
	int			run;			/* hand-offs in a row to local waiters */
	bool		others;			/* the latest freeing release's message
								 * reached someone besides this instance */
	TimestampTz back_until;		/* local waiters hold back until then for
								 * other clients (0: they do not) */
	int			back_echoes;	/* messages of the release that held them
								 * back still to come */
	bool		blocker;		/* a blocker group: its members are in
								 * blocked[], and nothing is handed off */
} WaitGroup;

typedef struct Waiter
{
	WaitGroup  *group;			/* NULL when not waiting */
	dlist_node	node;
	uint64		wakes_base;		/* in a blocker group: its wakes when the
								 * waiter joined */
} Waiter;

/*
 * Only two keys share a channel: "k" and "{k}" (a key with a brace names
 * its channel itself).  Per-key state of a group is indexed by this.
 */
#define WAITERS_VARIANT(key, keylen) \
	(memchr((key), '{', (keylen)) != NULL ? 1 : 0)

/* A wake-up passed on by a request that ended, to be done by the loop */
typedef struct PassedWake
{
	bool		handed;			/* the lock was handed to it */
	RlockKind	kind;
	int			keylen;
	char		key[FLEXIBLE_ARRAY_MEMBER];
} PassedWake;

static void waiters_leave_group(Waiter *w);

static HTAB *groups = NULL;
static List *passed = NIL;		/* PassedWake, oldest first */
static Waiter *waiters = NULL;	/* one per slot */
static Waiter *blocked = NULL;	/* one per slot: in a blocker group */
static char *channel_buf = NULL;
static int	nsubscribed = 0;	/* groups SUBSCRIBED */

/* The subscriber connections that groups subscribe (or are subscribing)
 * on, counted again only after a group changed */
static List *subs_conns = NIL;
static bool subs_stale = true;

/*
 * Every change of a group's state goes through here, to keep the count of
 * subscribed channels that rlock_status() shows.
 */
static void
waiters_set_state(WaitGroup *g, SubState state)
{
	if (g->state == state)
		return;
	subs_stale = true;
	if (g->state == SUB_SUBSCRIBED)
	{
		nsubscribed--;
		g->echoes = 0;			/* those messages will not come */
		g->back_echoes = 0;
	}
	if (state == SUB_SUBSCRIBED)
		nsubscribed++;
	g->state = state;
	rlock_redis_status_touch();
}

int
rlock_waiters_channels(void)
{
	return nsubscribed;
}

/*
 * Do waiters subscribe on "conn", or is a subscription on its way there?
 * (A Redis Cluster closes a primary's idle connections, not these.)
 */
bool
rlock_waiters_on(RlockConn *conn)
{
	if (groups == NULL)
		return false;
	if (subs_stale)
	{
		HASH_SEQ_STATUS seq;
		WaitGroup  *g;
		MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);

		list_free(subs_conns);
		subs_conns = NIL;
		hash_seq_init(&seq, groups);
		while ((g = (WaitGroup *) hash_seq_search(&seq)) != NULL)
		{
			if (g->conn != NULL && g->state != SUB_NONE)
				subs_conns = list_append_unique_ptr(subs_conns, g->conn);
		}
		MemoryContextSwitchTo(old);
		subs_stale = false;
	}
	return list_member_ptr(subs_conns, conn);
}

void
rlock_waiters_init(int nslots)
{
	groups = rlock_keyref_table("rlock wait groups", sizeof(WaitGroup),
								rlock_worker_context);
	waiters = MemoryContextAllocZero(rlock_worker_context,
									 sizeof(Waiter) * nslots);
	blocked = MemoryContextAllocZero(rlock_worker_context,
									 sizeof(Waiter) * nslots);
	channel_buf = MemoryContextAlloc(rlock_worker_context,
									 RLOCK_WAITER_CHANNEL_MAXLEN(rlock_max_key_length));
}

static WaitGroup *
waiters_find(const char *channel, int len)
{
	RlockKeyRef k;

	k.data = channel;
	k.len = len;
	return (WaitGroup *) hash_search(groups, &k, HASH_FIND, NULL);
}

static void
waiters_delete_group(WaitGroup *g)
{
	char	   *data = (char *) g->channel.data;

	Assert(g->nwaiters == 0);
	waiters_set_state(g, SUB_NONE);
	/* a command still on the wire (a redirection took it elsewhere) keeps
	 * it: its answer deletes it */
	if (g->inflight > 0)
		return;
	hash_search(groups, &g->channel, HASH_REMOVE, NULL);
	pfree(data);
}

/*
 * Queue one (un)subscribe command of a group.
 */
static bool
waiters_send_one(RlockConn *conn, WaitGroup *g, bool subscribe, bool sharded,
				 uint64 seq)
{
	RlockArgs  *args = worker_args();
	WorkerCmd  *wc;

	rlock_args_cstr(args, sharded ?
					(subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE") :
					(subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE"));
	rlock_args_add(args, g->channel.data, g->channel.len);
	wc = worker_cmd_new(subscribe ? WORKER_CMD_SUBSCRIBE :
						WORKER_CMD_UNSUBSCRIBE);
	wc->cmd.shape = sharded ?
		(subscribe ? RLOCK_SHAPE_SSUBSCRIBE : RLOCK_SHAPE_SUNSUBSCRIBE) :
		(subscribe ? RLOCK_SHAPE_SUBSCRIBE : RLOCK_SHAPE_UNSUBSCRIBE);
	wc->cmd.channel = g->channel.data;
	wc->cmd.channellen = g->channel.len;
	wc->seq = seq;
	wc->group = g;
	if (!worker_cmd_send(conn, wc, args))
		return false;
	g->inflight++;
	return true;
}

/*
 * Send SUBSCRIBE or UNSUBSCRIBE for a group's channel: in a Redis Cluster
 * to the primary of the channel's slot, sharded (SSUBSCRIBE), classic or
 * both, as rlock.cluster_pubsub says; an unsubscription goes where the
 * subscription went, in its namespaces.  With both, the group's state
 * follows the confirmation of the last command, which comes last on the
 * connection.
 */
static bool
waiters_send(WaitGroup *g, bool subscribe)
{
	RlockConn  *conn;
	int			pubsub;
	uint64		seq = g->sent;

	if (subscribe)
	{
		conn = rlock_redis_subscriber_for(g->channel.data, g->channel.len);
		pubsub = rlock_redis_pubsub();
	}
	else
	{
		conn = g->conn;
		pubsub = g->pubsub;
	}
	if (conn == NULL || !rlock_conn_ready(conn))
		return false;
	if ((pubsub & RLOCK_PUBSUB_CLASSIC) &&
		!waiters_send_one(conn, g, subscribe, false, ++seq))
		return false;
	if ((pubsub & RLOCK_PUBSUB_SHARDED) &&
		!waiters_send_one(conn, g, subscribe, true, ++seq))
	{
		/* the first one went: the group follows it no more */
		g->sent = seq;
		return false;
	}
	g->sent = seq;
	g->conn = conn;
	subs_stale = true;
	g->pubsub = pubsub;
	return true;
}

static void
waiters_subscribe(WaitGroup *g)
{
	if (waiters_send(g, true))
	{
		rlock_count(RLOCK_STAT_SUBSCRIPTIONS, 1);
		waiters_set_state(g, SUB_SUBSCRIBING);
	}
	else
		waiters_set_state(g, SUB_NONE);
}

/*
 * Retry waiters of a group: all (RLOCK_WAKE_ALL), or the first n that are
 * waiting (not trying already), which then move to the back of the line.
 * With a key, only waiters for that key (the keys "k" and "{k}" share a
 * channel), and those woken are told they were handed the lock.  False if
 * none was waiting.
 */
static bool
waiters_wake(WaitGroup *g, int n, const char *key, int keylen)
{
	dlist_mutable_iter iter;
	dlist_head	woken;
	int			nwoken = 0;

	if (n == 0)
		return false;
	dlist_init(&woken);
	dlist_foreach_modify(iter, &g->waiters)
	{
		Waiter	   *w = dlist_container(Waiter, node, iter.cur);

		if (worker_retry(w - (g->blocker ? blocked : waiters), key, keylen))
		{
			nwoken++;
			if (n != RLOCK_WAKE_ALL)
			{
				dlist_delete(&w->node);
				dlist_push_tail(&woken, &w->node);
				if (nwoken == n)
					break;
			}
		}
	}
	/* those woken go to the back of the line, in their order */
	while (!dlist_is_empty(&woken))
		dlist_push_tail(&g->waiters, dlist_pop_head_node(&woken));
	return nwoken > 0;
}

/*
 * The group of a key's channel, as its kind names it, or NULL.
 */
static WaitGroup *
waiters_find_key(RlockKind kind, const char *key, int keylen)
{
	WaitGroup  *g;

	if (hash_get_num_entries(groups) == 0)
		return NULL;
	g = waiters_find(channel_buf,
					 rlock_kinds[kind]->channel(channel_buf, key, keylen));
	/* another kind's line on the same channel is none of this kind's */
	return (g != NULL && g->kind == kind && !g->blocker) ? g : NULL;
}

/*
 * Is there a line of requests of this instance for the lock "key", held
 * by someone until a known time?  Its members wait, or try after a
 * wake-up or a hand-off.  Returns that time, the lease end the latest
 * busy answer or local grant gave, or 0.  A new request for the key then
 * joins the line instead of trying (it would overtake a member handed
 * the lock), and tries at that time at the latest.  *blocker is what
 * that answer named as the holder: the request listens where it
 * publishes, as the member that got the answer does, so that the line
 * still hears the lock freed when that member stops waiting first.
 */
TimestampTz
rlock_waiters_line(RlockKind kind, const char *key, int keylen, int *blocker)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);
	int			v = WAITERS_VARIANT(key, keylen);
	dlist_iter	iter;

	*blocker = 0;
	if (g == NULL || g->busy_until[v] == 0)
		return 0;
	dlist_foreach(iter, &g->waiters)
	{
		Waiter	   *w = dlist_container(Waiter, node, iter.cur);

		if (worker_in_line(w - waiters, key, keylen))
		{
			*blocker = g->blocker_of[v];
			return g->busy_until[v];
		}
	}
	return 0;
}

/*
 * The lock "key" the request in "slot" waits for is held until "until" (a
 * busy answer, or a grant to a member of the line), by "blocker" (the
 * busy answer's, 0 for a grant): members of the line that joined without
 * trying wait for that long at most.
 */
void
rlock_waiters_busy_until(int slot, const char *key, int keylen,
						 TimestampTz until, int blocker)
{
	WaitGroup  *g = waiters[slot].group;

	if (g != NULL)
	{
		g->busy_until[WAITERS_VARIANT(key, keylen)] = until;
		g->blocker_of[WAITERS_VARIANT(key, keylen)] = blocker;
	}
}

/* A channel whose SUBSCRIBE Redis refused is asked again this often */
#define WAITERS_RESUBSCRIBE_MS	1000

/*
 * Subscribe a group that is not (or no longer) subscribing, unless Redis
 * refused it less than a second ago: an ACL that forbids the channel must
 * not be asked at every retry, but one that allows it again must be.
 */
static void
waiters_subscribe_if_due(WaitGroup *g)
{
	if (g->state != SUB_NONE && g->state != SUB_UNSUBSCRIBING)
		return;
	if (g->refused_at != 0 &&
		GetCurrentTimestamp() <
		TimestampTzPlusMilliseconds(g->refused_at, WAITERS_RESUBSCRIBE_MS))
		return;
	waiters_subscribe(g);
}

/*
 * The group of the channel channel_buf names (len bytes), made if there
 * is none.
 */
static WaitGroup *
waiters_group(RlockKind kind, int len, bool blocker)
{
	WaitGroup  *g;
	RlockKeyRef k;
	bool		found;

	k.data = channel_buf;
	k.len = len;
	g = (WaitGroup *) hash_search(groups, &k, HASH_ENTER, &found);
	if (!found)
	{
		char	   *copy = MemoryContextAlloc(rlock_worker_context, len + 1);

		memcpy(copy, channel_buf, len + 1);
		g->channel.data = copy;
		g->kind = kind;
		g->state = SUB_NONE;	/* new: nothing to count yet */
		dlist_init(&g->waiters);
		g->nwaiters = 0;
		g->wakes = 0;
		g->sent = 0;
		g->echoes = 0;
		g->refused_at = 0;
		g->busy_until[0] = g->busy_until[1] = 0;
		g->blocker_of[0] = g->blocker_of[1] = 0;
		g->conn = NULL;
		subs_stale = true;
		g->pubsub = 0;
		g->inflight = 0;
		g->run = 0;
		g->others = false;
		g->back_until = 0;
		g->back_echoes = 0;
		g->blocker = blocker;
	}
	/* a channel is one kind's, and either a line's or a blocker's */
	Assert(g->kind == kind && g->blocker == blocker);
	return g;
}

/*
 * Put a waiter in a group, subscribing if it is the first.
 */
static void
waiters_add(Waiter *w, WaitGroup *g)
{
	w->group = g;
	w->wakes_base = g->wakes;
	dlist_push_tail(&g->waiters, &w->node);
	g->nwaiters++;
	waiters_subscribe_if_due(g);
}

/*
 * The request in "slot" waits for the lock "key": put it in the key's
 * group (or, for a kind whose waiters each have a channel, its own),
 * subscribing if it is the first.  If it is in already, subscribe again a
 * group whose subscription Redis refused a while ago.
 */
void
rlock_waiters_join(int slot, RlockKind kind, const char *key, int keylen)
{
	Waiter	   *w = &waiters[slot];
	const RlockKindMethod *method = rlock_kinds[kind];
	int			len;

	if (w->group != NULL)
	{
		waiters_subscribe_if_due(w->group);
		return;
	}
	if (method->waiter_channel != NULL)
	{
		RlockHold  *h = rlock_hold(worker_req(slot)->args.hold);
		RlockKindHold kh;

		memset(&kh, 0, sizeof(kh));
		kh.key = key;
		kh.keylen = keylen;
		kh.owner_id = h->owner_id;
		kh.mode = h->mode;
		len = method->waiter_channel(channel_buf, &kh);
	}
	else
		len = method->channel(channel_buf, key, keylen);
	waiters_add(w, waiters_group(kind, len, false));
}

/*
 * The request in "slot", a member of the key's group, found the lock held
 * by "blocker" (RlockAcquired): listen on the blocker's channel too, until
 * it stops waiting or finds the lock held by a holder of the kind's own
 * (0), whose release publishes on the key's channel.  Listening on would
 * only send it to fail behind every local hand-off, since each rlock
 * release tells the blocker's channel too (publish.lua).
 */
void
rlock_waiters_blocked(int slot, RlockKind kind, const char *key, int keylen,
					  int blocker)
{
	Waiter	   *w = &blocked[slot];
	const RlockKindMethod *method = rlock_kinds[kind];
	int			len = 0;

	if (blocker != 0 && method->blocker_channel != NULL)
		len = method->blocker_channel(channel_buf, key, keylen, blocker);
	if (len == 0)
	{
		waiters_leave_group(w);
		return;
	}
	/* another blocker now: the waiter listens where that one publishes */
	if (w->group != NULL &&
		(w->group->channel.len != len ||
		 memcmp(w->group->channel.data, channel_buf, len) != 0))
		waiters_leave_group(w);
	if (w->group != NULL)
		waiters_subscribe_if_due(w->group);
	else
		waiters_add(w, waiters_group(kind, len, true));
}

/*
 * A waiter leaves its group.  The last one takes its subscription away.
 */
static void
waiters_leave_group(Waiter *w)
{
	WaitGroup  *g = w->group;

	if (g == NULL)
		return;
	dlist_delete(&w->node);
	w->group = NULL;
	if (--g->nwaiters > 0)
		return;

	if ((g->state == SUB_SUBSCRIBING || g->state == SUB_SUBSCRIBED) &&
		waiters_send(g, false))
		waiters_set_state(g, SUB_UNSUBSCRIBING);
	else if (g->state != SUB_UNSUBSCRIBING)
		waiters_delete_group(g);
}

/*
 * The request in "slot" stops waiting: it leaves its group, and a
 * blocker's.
 */
void
rlock_waiters_leave(int slot)
{
	waiters_leave_group(&waiters[slot]);
	waiters_leave_group(&blocked[slot]);
}

/*
 * A request of "key" woken for a retry, or handed the lock, ended without
 * trying: another waiter must try in its place (the lock may be free, and
 * its unlock message was spent).  Noted here, and done by the worker's
 * loop (rlock_waiters_drain), not inside the ending request's completion.
 */
void
rlock_waiters_pass_on(RlockKind kind, const char *key, int keylen,
					  bool handed)
{
	MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);
	PassedWake *p = palloc(offsetof(PassedWake, key) + keylen + 1);

	p->handed = handed;
	p->kind = kind;
	p->keylen = keylen;
	memcpy(p->key, key, keylen);
	p->key[keylen] = '\0';
	passed = lappend(passed, p);
	MemoryContextSwitchTo(old);
}

/*
 * Pass on the wake-ups noted by rlock_waiters_pass_on(), in order: to one
 * waiter of the key's group (one of that key, which is handed the lock,
 * for a hand-off).  When none waits to take it, the lock may have been
 * freed with nobody here handed it: tries on the wire must not sleep.
 */
void
rlock_waiters_drain(void)
{
	while (passed != NIL)
	{
		PassedWake *p = (PassedWake *) linitial(passed);
		WaitGroup  *g;

		passed = list_delete_first(passed);
		g = waiters_find_key(p->kind, p->key, p->keylen);
		if (g == NULL ||
			!waiters_wake(g, 1, p->handed ? p->key : NULL, p->keylen))
			worker_note_release(p->key, p->keylen);
		pfree(p);
	}
}

/*
 * Wake-ups seen so far on the channels the request in "slot" waits on
 * (a blocker's counted from when it joined).
 */
uint64
rlock_waiters_wakes(int slot)
{
	WaitGroup  *g = waiters[slot].group;
	WaitGroup  *b = blocked[slot].group;

	return (g ? g->wakes : 0) + (b ? b->wakes - blocked[slot].wakes_base : 0);
}

/*
 * How many messages one release of this instance publishes that a group
 * receives: two when it follows both namespaces (rlock.cluster_pubsub =
 * both publishes in both).
 */
static int
waiters_echo_weight(WaitGroup *g)
{
	return g->pubsub == (RLOCK_PUBSUB_CLASSIC | RLOCK_PUBSUB_SHARDED) ? 2 : 1;
}

/*
 * Has the line run its rlock.handoff_limit hand-offs while someone else
 * listened, so that the next release frees the lock for everyone?
 */
static bool
waiters_run_over(WaitGroup *g)
{
	return g->others && rlock_handoff_limit > 0 &&
		g->run >= rlock_handoff_limit;
}

/*
 * Does the line hold back for other clients now?
 */
static bool
waiters_backing(WaitGroup *g)
{
	return g->back_until != 0 && GetCurrentTimestamp() < g->back_until;
}

/*
 * The line of a key has been handed the lock rlock.handoff_limit times in
 * a row while other clients listened: this release frees it for every
 * client instead.  The line holds back for RLOCK_HOLD_BACK_MS, time for a
 * client woken by the unlock message to take the lock; its first waiter
 * tries when that is over, or at once when someone else's unlock message
 * comes in first (the other client had its turn).  False if no waiter of
 * the key was waiting.
 */
static bool
waiters_hold_back(WaitGroup *g, const char *key, int keylen)
{
	dlist_iter	iter;
	TimestampTz until;

	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										RLOCK_HOLD_BACK_MS);
	dlist_foreach(iter, &g->waiters)
	{
		Waiter	   *w = dlist_container(Waiter, node, iter.cur);

		if (worker_retry_at(w - waiters, key, keylen, until))
		{
			g->run = 0;
			g->back_until = until;
			/* this release's own message is no one else's turn */
			g->back_echoes = (g->state == SUB_SUBSCRIBED) ?
				waiters_echo_weight(g) : 0;
			return true;
		}
	}
	return false;
}

/*
 * A release of "key" freed it, and its unlock message reached "heard"
 * subscribers (-1: the kind does not say).  Did anyone listen besides
 * this instance's own subscription?  Only then is a line held back.
 */
void
rlock_waiters_heard(RlockKind kind, const char *key, int keylen, int heard)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);
	int			own;

	if (g == NULL || heard < 0)
		return;
	/*
	 * A subscription still to be confirmed may have been counted already:
	 * counted as ours, so that no line is held back for itself (at worst
	 * one other listener is missed until the confirmation).
	 */
	own = (g->state == SUB_SUBSCRIBED || g->state == SUB_SUBSCRIBING) ?
		waiters_echo_weight(g) : 0;
	g->others = heard > own;
}

/*
 * This instance is freeing "key" for n others (the kind's hand_off
 * says how many): hand it to that many local waiters, whose tries go out
 * right behind the release instead of after the round trip of the unlock
 * message.  Returns RLOCK_HANDED_OFF if a waiter was retried, and
 * RLOCK_HANDED_OFF_ECHO if besides the release's unlock message will
 * reach the group, which then lets it pass (see
 * rlock_waiters_echo_cancel); 0 if no local waiter was waiting.
 */
int
rlock_waiters_hand_off(RlockKind kind, const char *key, int keylen, int n)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);

	if (g == NULL)
		return 0;
	if (waiters_run_over(g) && waiters_hold_back(g, key, keylen))
		return 0;
	if (!waiters_wake(g, n, key, keylen))
	{
		g->run = 0;				/* freed for everyone */
		return 0;
	}
	if (g->run < INT_MAX)
		g->run++;
	/*
	 * The release's own unlock message is let pass as an echo: the woken
	 * waiter's try follows the release on the same connection, or, synced
	 * on the sync connection, waits for the release's answer (send.c).
	 */
	if (g->state != SUB_SUBSCRIBED)
		return RLOCK_HANDED_OFF;
	g->echoes += waiters_echo_weight(g);
	return RLOCK_HANDED_OFF_ECHO;
}

/*
 * The waiter this instance's release of "key" may hand the lock to in
 * one command with the release (transfer.c): the first of the line
 * waiting for that key, unless the line is to hold back for other
 * clients (rlock_waiters_hand_off does that then) or does so now.  -1 if
 * there is none; nothing changes until rlock_waiters_transferred().
 */
int
rlock_waiters_next(RlockKind kind, const char *key, int keylen)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);
	dlist_iter	iter;

	if (g == NULL || waiters_run_over(g) || waiters_backing(g))
		return -1;
	dlist_foreach(iter, &g->waiters)
	{
		Waiter	   *w = dlist_container(Waiter, node, iter.cur);

		if (worker_waiting(w - waiters, key, keylen))
			return w - waiters;
	}
	return -1;
}

/*
 * A request of this instance was granted "key" in a mode that others may
 * share (the plain kind's shared mode): the members of the key's line
 * that wait for it in that mode may have it too.  Retry them at once, in
 * the line's order, up to the first that waits for it in another mode
 * (which keeps its place: later readers do not overtake it).
 */
void
rlock_waiters_shared(RlockKind kind, const char *key, int keylen, int mode)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);
	dlist_iter	iter;

	if (g == NULL)
		return;
	dlist_foreach(iter, &g->waiters)
	{
		int			slot = dlist_container(Waiter, node, iter.cur) - waiters;

		if (!worker_in_line(slot, key, keylen))
			continue;
		if (worker_req(slot)->args.mode != mode)
			break;
		(void) worker_retry(slot, key, keylen);
	}
}

/*
 * Is the line of "key" holding back for other clients now?
 */
bool
rlock_waiters_holding_back(RlockKind kind, const char *key, int keylen)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);

	return g != NULL && waiters_backing(g);
}

/*
 * The lock of "key" went from one local holder to the next without being
 * freed, and "heard" clients listen on its channel: one more hand-off in
 * the line's run.  No unlock message comes of it.  When Redis would not
 * say who listens (-1: a user without PUBSUB), someone else may: the
 * line's run stays bounded.
 */
void
rlock_waiters_transferred(RlockKind kind, const char *key, int keylen,
						  int heard)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);

	if (g == NULL)
		return;
	if (g->run < INT_MAX)
		g->run++;
	if (heard < 0)
		g->others = true;
	else
		rlock_waiters_heard(kind, key, keylen, heard);
}

/*
 * A release that expected an echo (RLOCK_HANDED_OFF_ECHO) did not free the
 * lock, or may not have: its message is not to be waited for.  If a
 * message was let pass in its place already, that one was someone else's
 * unlock: wake a waiter now, as it would have.
 */
void
rlock_waiters_echo_cancel(RlockKind kind, const char *key, int keylen)
{
	WaitGroup  *g = waiters_find_key(kind, key, keylen);

	if (g == NULL)
		return;
	if (g->echoes > 0)
		g->echoes = Max(g->echoes - waiters_echo_weight(g), 0);
	else
	{
		g->wakes++;
		waiters_wake(g, 1, NULL, 0);
	}
}

/*
 * A subscribe or unsubscribe confirmation: [kind, channel, count] (the
 * connection checked the shape), an error, or NULL (lost, or in a Redis
 * Cluster not taken now).  It must name the channel of the group
 * it was sent for, which lives at least as long as the connection has a
 * command for it in flight.  A refused SUBSCRIBE (an ACL without the
 * channel) leaves the group unsubscribed: its waiters keep their
 * TTL-bounded timers, and their next retry after a second subscribes
 * again.
 */
static void
waiters_answer(RlockConn *conn, WorkerCmd *wc, WaitGroup *g,
			   const RlockReply *reply)
{
	const RlockReply *channel;

	if (reply == NULL)
	{
		bool		subscribing = g->state == SUB_SUBSCRIBING;

		if (wc->seq != g->sent ||
			(!subscribing && g->state != SUB_UNSUBSCRIBING))
			return;
		waiters_set_state(g, SUB_NONE);

		/*
		 * A subscription that did not happen is asked for again at once,
		 * where the slot map now says: in a Redis Cluster, a redirection
		 * not taken now (the new primary's connection was being made)
		 * comes back this way, and that connection may have become ready
		 * meanwhile, finding the group still subscribing.  A connection
		 * lost or not ready takes nothing here; its readiness subscribes
		 * the group then.
		 */
		if (subscribing && g->nwaiters > 0)
			waiters_subscribe(g);
		return;
	}
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		if (wc->type == WORKER_CMD_SUBSCRIBE && wc->seq == g->sent &&
			g->state == SUB_SUBSCRIBING)
		{
			g->refused_at = GetCurrentTimestamp();
			waiters_set_state(g, SUB_NONE);
		}
		/* a refused unsubscription: the group goes all the same */
		else if (wc->type == WORKER_CMD_UNSUBSCRIBE && wc->seq == g->sent &&
				 g->state == SUB_UNSUBSCRIBING && g->nwaiters == 0)
			waiters_set_state(g, SUB_NONE);
		return;
	}
	channel = reply->element[1];
	if (channel->type != RLOCK_REPLY_STRING ||
		channel->len != g->channel.len ||
		memcmp(channel->str, g->channel.data, channel->len) != 0)
	{
		rlock_conn_fail(conn, "a confirmation for another channel");
		return;
	}
	if (wc->seq != g->sent)
		return;					/* overtaken by a later command */

	if (wc->type == WORKER_CMD_SUBSCRIBE && g->state == SUB_SUBSCRIBING)
	{
		/* a redirection may have taken it to another node */
		g->conn = conn;
		subs_stale = true;
		waiters_set_state(g, SUB_SUBSCRIBED);
		waiters_wake(g, RLOCK_WAKE_ALL, NULL, 0);
	}
	else if (wc->type == WORKER_CMD_UNSUBSCRIBE &&
			 g->state == SUB_UNSUBSCRIBING && g->nwaiters == 0)
		waiters_set_state(g, SUB_NONE);
}

void
rlock_waiters_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	WaitGroup  *g = (WaitGroup *) wc->group;

	Assert(g->inflight > 0);
	g->inflight--;
	waiters_answer(conn, wc, g, reply);
	/* a group left while this was on the wire goes with its last answer */
	if (g->nwaiters == 0 && g->inflight == 0 &&
		(g->state == SUB_NONE ||
		 (g->state == SUB_UNSUBSCRIBING && reply == NULL)))
		waiters_delete_group(g);
}

/*
 * A message published on a channel we subscribed.
 */
void
rlock_waiters_message(const char *channel, int channellen,
					  const char *payload, int payloadlen)
{
	WaitGroup  *g = waiters_find(channel, channellen);
	const RlockKindMethod *kind;

	rlock_count(RLOCK_STAT_UNLOCK_MESSAGES, 1);
	if (g == NULL)
		return;
	kind = rlock_kinds[g->kind];
	if (g->echoes > 0 && payloadlen == strlen(kind->free_message) &&
		memcmp(payload, kind->free_message, payloadlen) == 0)
	{
		g->echoes--;			/* ours, and handed off already */
		return;
	}
	if (g->back_until != 0)
	{
		/*
		 * The release that held the line back published before any later
		 * one, and its messages come first on the one subscriber
		 * connection, however late the worker reads them: taken for
		 * someone else's unlock, a late one would retry (and move to the
		 * back) a member waiting behind the one whose turn it is.
		 */
		if (g->back_echoes > 0)
		{
			g->back_echoes--;	/* ours */
			g->wakes++;
			return;
		}
		g->back_until = 0;		/* someone else's unlock: try now */
		g->back_echoes = 0;
	}
	g->wakes++;
	waiters_wake(g, kind->wake(payload, payloadlen), NULL, 0);
}

/*
 * A subscriber connection is (back) up: subscribe again where waiters
 * wait and no subscription is under way.
 */
void
rlock_waiters_conn_ready(RlockConn *conn)
{
	HASH_SEQ_STATUS seq;
	WaitGroup  *g;

	hash_seq_init(&seq, groups);
	while ((g = (WaitGroup *) hash_seq_search(&seq)) != NULL)
	{
		if (g->state != SUB_NONE)
			continue;
		if (g->nwaiters > 0)
			waiters_subscribe(g);
		else
			waiters_delete_group(g);
	}
}

/*
 * A subscriber connection is gone, and every subscription made on it.
 * Waiters keep their TTL-bounded timers.
 */
void
rlock_waiters_conn_lost(RlockConn *conn)
{
	HASH_SEQ_STATUS seq;
	WaitGroup  *g;

	hash_seq_init(&seq, groups);
	while ((g = (WaitGroup *) hash_seq_search(&seq)) != NULL)
	{
		if (g->conn != conn)
			continue;
		waiters_set_state(g, SUB_NONE);
		g->conn = NULL;
		subs_stale = true;
		if (g->nwaiters == 0)
			waiters_delete_group(g);
	}
}

/*
 * Redis dropped a shard channel by itself: its slot moved.  Subscribe
 * again, to the slot's new primary (a redirection takes the subscription
 * there if the map does not know it yet); the waiters are retried when
 * it is confirmed, as the lock may have been freed meanwhile.
 */
void
rlock_waiters_unsubscribed(RlockConn *conn, const char *channel,
						   int channellen)
{
	WaitGroup  *g = waiters_find(channel, channellen);

	if (g == NULL || g->conn != conn || g->state != SUB_SUBSCRIBED)
		return;
	/* its classic subscription, if any, is still there: dropped too */
	if (g->pubsub & RLOCK_PUBSUB_CLASSIC)
		(void) waiters_send_one(conn, g, false, false, ++g->sent);
	waiters_set_state(g, SUB_NONE);
	g->conn = NULL;
	subs_stale = true;
	if (g->nwaiters > 0)
		waiters_subscribe(g);
	else
		waiters_delete_group(g);
}
