/*-------------------------------------------------------------------------
 *
 * kinds.h
 *		Lock kinds as a table, in the spirit of PostgreSQL's LockMethods[]:
 *		each kind says how its holds are taken, given back, renewed and
 *		checked in Redis, and what Redis's answers mean.
 *
 * The worker's request path is the same for every kind; only the
 * commands differ.  A kind keeps together its Lua scripts (.lua files,
 * embedded at build time), the commands built from them, the parsing of
 * their replies (worker side) and its SQL functions (backend side, in
 * its folder's sql.c).  Every command a kind builds is idempotent: it
 * names the amount to leave, never a step (kinds/README.md).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/kinds.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_KINDS_H
#define RLOCK_KINDS_H

#include "redis/redis.h"

/*
 * How much of a lock an owner holds, in its kind's unit: for a kind
 * counted by owners (plain) the hold count, re-entries included; for a
 * kind counted in permits, the permits the owner has.  Commands name the
 * amount to leave in Redis (0: none), never a step.
 */
typedef int32 RlockAmount;

/* One owner's holds on one key in one mode, as the commands name them */
typedef struct RlockKindHold
{
	const char *key;
	int			keylen;
	uint64		owner_id;
	int			mode;			/* the kind's mode; 0 for a kind without */
	RlockAmount held;			/* acquire: what the owner held before it,
								 * in the kind's unit */
	bool		waited;			/* acquire: a waiter's try, which leaves a
								 * lock yielded to other clients to them */
	int64		queue_ms;		/* acquire, give_up: how long the owner may
								 * wait in ms (-1: without limit, 0: it may
								 * not), for a kind that queues its waiters
								 * in Redis (give_up) */
} RlockKindHold;

/* A message that retries every waiter of its channel (the wake method) */
#define RLOCK_WAKE_ALL		(-1)

/* What an acquire's reply says */
typedef struct RlockAcquired
{
	bool		granted;		/* the owner now holds the amount asked for */
	bool		lost;			/* the owner's earlier holds were gone */
	int64		value;			/* granted: the fencing token (0: none);
								 * else the lease left in ms (-1: none,
								 * -2: the key is gone) */
	int			blocker;		/* not granted: 0 if the holder's release
								 * publishes on the kind's channel, else
								 * which other kind of lock of the family
								 * holds it (its blocker_channel) */
} RlockAcquired;

/* What a release's reply says */
typedef enum RlockReleased
{
	RLOCK_RELEASED_NOT_HELD,	/* the owner had no hold left */
	RLOCK_RELEASED_KEPT,		/* holds remain, their lease reset */
	RLOCK_RELEASED_FREED,		/* what was given back is free to others,
								 * and waiters were told */
	RLOCK_RELEASED_INVALID		/* the reply means nothing */
} RlockReleased;

/* The batches: the same holds, renewed or checked */
typedef enum RlockBatchKind
{
	RLOCK_BATCH_RENEW,			/* reset the lease of those still held */
	RLOCK_BATCH_VERIFY			/* are they held; extend short leases */
} RlockBatchKind;

/* What a batch's reply says of one hold */
typedef enum RlockBatchResult
{
	RLOCK_BATCH_INVALID,		/* the reply means nothing */
	RLOCK_BATCH_NOT_HELD,
	RLOCK_BATCH_HELD,
	RLOCK_BATCH_ELSEWHERE		/* a Redis Cluster node that no longer
								 * serves the key's slot: ask its new one */
} RlockBatchResult;

typedef struct RlockKindMethod
{
	/* worker start: register the scripts */
	void		(*init) (void);

	/*
	 * What one acquire adds to the owner's amount and one release gives
	 * back (1 for the plain kind).  The worker counts requests granted;
	 * a command names that count times the step.
	 */
	RlockAmount step;

	/* leave the owner holding "amount", with a lease; count a token */
	void		(*acquire) (RlockArgs *args, RlockCmd *cmd,
							const RlockKindHold *hold, RlockAmount amount,
							int64 lease_ms, bool want_token);
	bool		(*acquire_result) (const RlockReply *reply,
								   RlockAcquired *result);

	/* leave the owner holding "amount" (0: nothing), what remains with a
	 * lease */
	void		(*release) (RlockArgs *args, RlockCmd *cmd,
							const RlockKindHold *hold, RlockAmount amount,
							int64 lease_ms);
	/* what the reply says; *freed: the amount it made free to others */
	RlockReleased (*release_result) (const RlockReply *reply,
									 RlockAmount *freed);

	/* renew or check n holds at once, with a lease or a margin in ms; in
	 * a Redis Cluster the holds may be of many slots of one primary */
	void		(*batch) (RlockArgs *args, RlockCmd *cmd, RlockBatchKind which,
						  int64 ms, const RlockKindHold *holds, int n);
	/* whether the reply says hold i is still there */
	RlockBatchResult (*batch_result) (const RlockReply *reply, int i);

	/* the lease left in ms of a key shaped like a lock (-1: none), -2 for
	 * any other key; the reply is that integer */
	void		(*probe) (RlockArgs *args, RlockCmd *cmd, const char *key,
						  int keylen);

	/* remove the lock whoever holds it, and wake its waiters; the reply
	 * is an integer, 1 if there was one */
	void		(*force) (RlockArgs *args, RlockCmd *cmd, const char *key,
						  int keylen);

	/* who holds the lock; the result is text for rlock_holder(): owner,
	 * count, instance name, pid and number of owners, each on its line
	 * ("" when the lock is free), and the lease left in ms; false if the
	 * reply means nothing */
	void		(*holder) (RlockArgs *args, RlockCmd *cmd, const char *key,
						   int keylen);
	bool		(*holder_result) (const RlockReply *reply, char *buf,
								  int buflen, int64 *lease_ms);

	/*
	 * Waiting, for the worker's waiters (worker/waiters.c) and releases
	 * (worker/releases.c).  The channel the waiters of a key listen on,
	 * written to buf (room for RLOCK_CHANNEL_MAXLEN(keylen)); its length.
	 */
	int			(*channel) (char *buf, const char *key, int keylen);
	/* optional: where the holder a busy reply named (blocker, not 0)
	 * publishes its releases, written to buf as channel does; 0 if
	 * nowhere the waiters could listen.  The waiters of the key listen
	 * there too, while they wait and their tries find that holder
	 * (worker/waiters.c). */
	int			(*blocker_channel) (char *buf, const char *key, int keylen,
									int blocker);
	/* how many waiters a message on that channel, or on a blocker's,
	 * retries: RLOCK_WAKE_ALL for every one, 0 for none */
	int			(*wake) (const char *payload, int len);
	/* optional: the channel a waiter of this hold listens on, when each
	 * has its own (the fair kind: its owner's, where its turn is told),
	 * written to buf (room for RLOCK_WAITER_CHANNEL_MAXLEN(keylen)); its
	 * length.  Such waiters form no line and are handed nothing: each
	 * tries at once and waits for its own message. */
	int			(*waiter_channel) (char *buf, const RlockKindHold *hold);
	/* how many local waiters of the key a release of this instance that
	 * leaves the owner "left" hands the lock to, right behind it */
	int			(*hand_off) (RlockAmount left);
	/* the message a release that frees the lock publishes (let pass when
	 * it follows a hand-off, published again after an ASK) */
	const char *free_message;
	/* optional: how many subscribers heard the message of a release whose
	 * reply said RLOCK_RELEASED_FREED, -1 if it does not say; without it
	 * (NULL) a line of this instance's waiters is never held back for
	 * other clients (worker/waiters.c) */
	int			(*release_heard) (const RlockReply *reply);
	/* optional: for "ms", the waiters' tries of rlock (every instance's)
	 * find the lock, just freed, busy, and other clients may take it;
	 * the reply does not matter */
	void		(*yield) (RlockArgs *args, RlockCmd *cmd, const char *key,
						  int keylen, int ms);

	/*
	 * Client-side tracking (worker/track.c): true if a granting acquire
	 * reads the hold's key before and after its writes, under the name
	 * the hold has, so that Redis announces any later change of it, and
	 * then publishes the mark the worker adds as two more arguments
	 * (channel, mark: a string published as it is).  Left false, the kind's holds are never vouched
	 * for without asking.
	 */
	bool		acquire_rereads;

	/*
	 * Optional (NULL: never): hand a lock a release of "from" would free
	 * straight to "to", who is left holding "amount" with a lease, in one
	 * command that leaves the key held throughout and publishes nothing
	 * (worker/transfer.c).  Its script follows acquire_rereads's rules for
	 * the taker and publishes the mark the worker adds as two more
	 * arguments.  Never used in a Redis Cluster.
	 */
	void		(*transfer) (RlockArgs *args, RlockCmd *cmd,
							 const RlockKindHold *from,
							 const RlockKindHold *to, RlockAmount amount,
							 int64 lease_ms);
	/* whether the lock changed hands (false: "from" held nothing, and
	 * nothing changed), and in *heard how many clients listen on the
	 * key's channel (-1: not known); false if the reply means nothing */
	bool		(*transfer_result) (const RlockReply *reply, bool *moved,
									int *heard);

	/*
	 * Optional, for a kind whose waiters queue in Redis (an acquire whose
	 * hold->queue_ms is not 0 puts its owner in the queue): the owner no
	 * longer waits (its wait ran out, it was cancelled, its session
	 * ended) and leaves the queue, hold->queue_ms being what its acquires
	 * said; the reply does not matter.
	 */
	void		(*give_up) (RlockArgs *args, RlockCmd *cmd,
							const RlockKindHold *hold);

	/*
	 * Optional (NULL: never): take n keys at once, all or none, for one
	 * owner holding none of them (each hold's mode is the kind's first,
	 * its amount 0 before and the step after), with a lease, in one
	 * command whose keys the caller made sure share a slot in a Redis
	 * Cluster.  No token, no yield mark, no tracking mark
	 * (worker/send.c).  The result says whether all were taken, or which
	 * one (from 0) someone else holds; false if the reply means nothing.
	 */
	void		(*acquire_set) (RlockArgs *args, RlockCmd *cmd,
								const RlockKindHold *holds, int n,
								int64 lease_ms);
	bool		(*acquire_set_result) (const RlockReply *reply, int n,
									   int *busy);

	/*
	 * Optional, for a kind with calls of its own on a key, such as setting
	 * a semaphore's permits or counting a latch down (the SQL functions
	 * name them by number): the command of call "which" with its argument;
	 * the reply is an integer, which the SQL function gets.  Sent once and
	 * never again, so a call need not be idempotent.
	 */
	void		(*call) (RlockArgs *args, RlockCmd *cmd, const char *key,
						 int keylen, int which, int64 arg);
} RlockKindMethod;

/* room for the channel of a waiter of its own (waiter_channel) */
#define RLOCK_WAITER_CHANNEL_MAXLEN(keylen) \
	(RLOCK_CHANNEL_MAXLEN(keylen) + RLOCK_OWNER_MAXLEN + 1)

/* every kind's methods (shared.h's list names them), and the table */
#define RLOCK_KIND_METHODS(NUMBER, name) \
	extern const RlockKindMethod rlock_kind_##name;
RLOCK_KIND_LIST(RLOCK_KIND_METHODS)
RLOCK_TEST_KIND_LIST(RLOCK_KIND_METHODS)

extern const RlockKindMethod *const rlock_kinds[RLOCK_NKINDS];

extern void rlock_kinds_init(void);

/*
 * Building a kind's commands without asking about the topology (kinds.c).
 *
 * A script's keys go in KEYS, so that Redis Cluster routes the command
 * and follows a redirection.  A channel is declared as a key only outside
 * a cluster: there a declared channel would make a migrating slot answer
 * TRYAGAIN, so it goes to ARGV, beside the publish command.  A command
 * that publishes is built in this order:
 *
 *	rlock_kind_script(args, script, nkeys, nchannels);
 *	the nkeys keys (rlock_args_add), then each channel (rlock_kind_channel);
 *	the script's own arguments;
 *	for each channel, rlock_kind_publish.
 *
 * and the script publishes with publish.lua's rlock_publish() or
 * rlock_free(), which read the channel where these functions put it.
 */
extern void rlock_kind_script(RlockArgs *args, int script, int nkeys,
							  int nchannels);
extern void rlock_kind_channel(RlockArgs *args, const char *channel,
							   int len);
extern void rlock_kind_publish(RlockArgs *args, const char *channel,
							   int len);
extern void rlock_kind_owner(RlockArgs *args, const RlockKindHold *hold);

/*
 * A batch (renew, verify) of n holds in the layout batch.lua reads: in a
 * Redis Cluster the holds of one primary, over many slots, go undeclared;
 * and what its reply says of hold i.
 */
extern void rlock_kind_batch(RlockArgs *args, RlockCmd *cmd, int script,
							 int64 ms, const RlockKindHold *holds, int n);
extern RlockBatchResult rlock_kind_batch_result(const RlockReply *reply,
												int i);

#endif							/* RLOCK_KINDS_H */
