/*-------------------------------------------------------------------------
 *
 * shared.h
 *		What backends and the worker share: the shared memory protocol
 *		(request slots, the hold table, the ring), counters and the
 *		worker's published status, and the names derived from a key.
 *
 * The locking rules for every field are in shared/README.md and at the
 * top of shmem.c (in short).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/shared.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_SHARED_H
#define RLOCK_SHARED_H

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/palloc.h"

#include "rlock.h"

/* Names derived from a lock key: this prefix plus the key, in braces */
#define RLOCK_CHANNEL_PREFIX	"redisson_lock__channel:"
#define RLOCK_TOKEN_PREFIX		"redisson_lock_token:"
#define RLOCK_YIELD_PREFIX		"rlock_yield:"
#define RLOCK_RWLOCK_PREFIX		"redisson_rwlock:"
#define RLOCK_QUEUE_PREFIX		"redisson_lock_queue:"
#define RLOCK_DEADLINES_PREFIX	"redisson_lock_timeout:"
#define RLOCK_SEMAPHORE_PREFIX	"redisson_sc:"
/* a latch's channel: this prefix and the key, always in braces */
#define RLOCK_LATCH_PREFIX		"redisson_countdownlatch__channel__"

/*
 * What a request asks for.  Releases at transaction end do not use a
 * request: they go through the release ring (see README.md).
 */
typedef enum RlockOp
{
	RLOCK_OP_ACQUIRE,			/* take one hold, waiting up to a deadline */
	RLOCK_OP_RELEASE,			/* give back one hold and report the outcome */
	RLOCK_OP_EXISTS,			/* is the key held by anyone */
	RLOCK_OP_PTTL,				/* remaining lease of the key */
	RLOCK_OP_BARRIER,			/* answered once everything before it is */
	RLOCK_OP_VERIFY,			/* are the session's holds still there */
	RLOCK_OP_FORCE,				/* remove the key, whoever holds it */
	RLOCK_OP_HOLDER,			/* who holds the key */
	RLOCK_OP_CALL,				/* one of the kind's calls on the key (its
								 * call method): sent once, never again */
	RLOCK_OP_ACQUIRE_SET		/* take one hold on each of several keys,
								 * all or none, in one command, without
								 * waiting (kinds/plain/multi.c) */
} RlockOp;

/*
 * The most keys an ACQUIRE_SET takes in one command; its entries travel
 * as (index, generation) pairs in the slot's key buffer, so fewer when
 * rlock.max_key_length leaves less room.
 */
#define RLOCK_SET_MAX_KEYS		16

/*
 * The kinds of lock, one line each: X(NUMBER, name) makes RLOCK_KIND_NUMBER
 * the number requests and hold entries carry, rlock_kind_name the kind's
 * methods (src/kinds/name/) and "name" what rlock_locks shows.  Every kind
 * has its own Redis layout and scripts; the request path is the same for
 * all.  A build with make RLOCK_TEST_KINDS=1 adds the kinds of
 * test/kinds/test_kinds.h after these, for tests only.
 */
#define RLOCK_KIND_LIST(X) \
	X(PLAIN, plain)				/* Redisson RLock: reentrant exclusive, and
								 * its read lock (the shared mode) */ \
	X(FAIR, fair)				/* Redisson fair lock: exclusive, FIFO */ \
	X(SEMAPHORE, semaphore)		/* Redisson permit-expirable semaphore */ \
	X(LATCH, latch)				/* Redisson count-down latch */

/*
 * The kinds whose lock is the hash of Redisson's lock family at the key
 * itself (its RLock, fair and read-write locks): a session holds a key in
 * one of them at a time (backend/calls.c), and a forced release removes
 * every one's holds of the key (worker/entries.c).
 */
#define RLOCK_KIND_IN_FAMILY(kind) \
	((kind) == RLOCK_KIND_PLAIN || (kind) == RLOCK_KIND_FAIR)

#ifdef RLOCK_TEST_KINDS
#include "test_kinds.h"
#else
#define RLOCK_TEST_KIND_LIST(X)
#endif

#define RLOCK_KIND_NUMBER(NUMBER, name) RLOCK_KIND_##NUMBER,
typedef enum RlockKind
{
	RLOCK_KIND_LIST(RLOCK_KIND_NUMBER)
	RLOCK_TEST_KIND_LIST(RLOCK_KIND_NUMBER)
	RLOCK_NKINDS
} RlockKind;

/* Outcome of a request, written by the worker */
typedef enum RlockStatus
{
	RLOCK_STATUS_NONE,
	RLOCK_STATUS_OK,			/* done; for ACQUIRE: the hold was granted */
	RLOCK_STATUS_BUSY,			/* ACQUIRE: still held by another owner;
								 * ACQUIRE_SET: one of the keys is (value:
								 * which, from 0) */
	RLOCK_STATUS_NOT_HELD,		/* RELEASE: Redis no longer had the hold */
	RLOCK_STATUS_CONNECTION,	/* Redis unreachable or not answering */
	RLOCK_STATUS_REDIS_ERROR,	/* Redis answered with an error */
	RLOCK_STATUS_SHUTDOWN,		/* the worker exited before answering */
	RLOCK_STATUS_NOT_SYNCED,	/* ACQUIRE: granted, but too few replicas
								 * confirmed it; undone */
	RLOCK_STATUS_DECLINED		/* ACQUIRE_SET: not taken in one command
								 * (a key held already, the keys span
								 * slots of a Redis Cluster, Redis answered
								 * the command or its WAIT with an error
								 * or not at all): nothing is held, take
								 * them one by one */
} RlockStatus;

/* Life of a request slot; see README.md for who moves it where */
typedef enum RlockSlotState
{
	RLOCK_SLOT_IDLE,			/* no request, or one the backend gave up */
	RLOCK_SLOT_PENDING,			/* submitted, not yet taken by the worker */
	RLOCK_SLOT_TAKEN,			/* the worker works on it */
	RLOCK_SLOT_DONE				/* the result is ready */
} RlockSlotState;

/*
 * What a request asks for, as the backend fills it in: declared once and
 * embedded in the backend's RlockRequest, the shared RlockSlot and the
 * worker's WorkerReq, each copying it to the next by assignment.  The key
 * travels beside it (a pointer in the backend's and the worker's request,
 * a buffer at the end of the slot), as its length varies.
 */
typedef struct RlockRequestArgs
{
	RlockOp		op;
	uint8		kind;			/* RlockKind whose commands serve it */
	uint8		mode;			/* the kind's mode; 0 for a kind without */
	bool		want_token;		/* ACQUIRE: count a fencing token */
	bool		session;		/* ACQUIRE: for a session-scoped hold */
	bool		deadlock_global;	/* ACQUIRE: the worker looks for
									 * deadlocks across instances through
									 * its wait (rlock.deadlock_detection) */
	bool		upgrade;		/* ACQUIRE: exclusive, by a session that
								 * holds the key shared only: it joins no
								 * line of waiters (worker/send.c) */
	bool		checked;		/* ACQUIRE: the commit checks the hold
								 * (transaction-scoped, a check before
								 * commit that is not off) */
	TimestampTz fresh_after;	/* VERIFY: the worker may answer without
								 * asking Redis if tracking vouches for
								 * every hold and it handled the
								 * announcements up to this; 0: it asks */
	uint64		owner_id;		/* the requesting session's owner number */
	int			hold;			/* hold entry, or -1 */
	uint32		hold_generation;	/* of that entry, as the backend knows it */
	TimestampTz wait_until;		/* ACQUIRE: give up after this; 0 = never */
	int64		lease_ms;		/* ACQUIRE: lease, 0 = the watchdog;
								 * VERIFY: the safety margin */
	int32		amount;			/* ACQUIRE: how much it adds to the hold
								 * (1 for a lock, the permits for a
								 * semaphore) */
	int16		call;			/* CALL: which of the kind's calls, */
	int64		call_arg;		/* and its argument */
	int			keylen;			/* EXISTS, PTTL, FORCE, HOLDER: the key's
								 * length; 0 for none */
	int			nset;			/* ACQUIRE_SET: how many entries, whose
								 * (index, generation) pairs fill the key
								 * buffer; 0 for any other request */
} RlockRequestArgs;

/*
 * One request slot per backend, indexed by rlock_backend_index().  The key buffer
 * at the end holds rlock_max_key_length bytes plus a terminator, so slots
 * are addressed through rlock_slot().
 */
typedef struct RlockSlot
{
	slock_t		mutex;
	RlockSlotState state;
	uint64		seq;			/* number of the current request */
	bool		queued;			/* the slot sits in the ring */
	Latch	   *latch;			/* the owning backend's latch */

	/* the request: written by the backend before it becomes PENDING */
	RlockRequestArgs args;
	int			pid;			/* the owning backend, for the views */
	Oid			userid;
	TimestampTz submitted_at;

	/* set by the worker: ACQUIRE found the lock busy and waits */
	bool		busy;
	/* set by the worker: ACQUIRE closes a deadlock across instances, which
	 * "detail" describes; the backend gives the request up (worker/wfg.c) */
	bool		deadlock;

	/* the result: written by the worker before it becomes DONE */
	RlockStatus status;
	int64		value;			/* ACQUIRE: the token; VERIFY: holds lost;
								 * EXISTS, PTTL: Redis's answer;
								 * ACQUIRE_SET, BUSY: the busy key */
	char		detail[RLOCK_DETAIL_LEN];

	char		key[FLEXIBLE_ARRAY_MEMBER];	/* args.keylen bytes and a NUL */
} RlockSlot;

/*
 * One entry of the shared hold table: the holds one backend session has on
 * one key.  The entry carries what the worker needs to send releases and
 * renewals without asking the backend.  Allocated by the backend, freed by
 * whichever side finds it idle (rlock_hold_try_free).
 */
typedef struct RlockHold
{
	slock_t		mutex;
	bool		in_use;
	uint32		generation;		/* bumped whenever the entry is freed */
	int			next_free;		/* free list link, under holds_mutex */

	/* constant while in use */
	uint64		owner_id;		/* the <n> of the owner "<uuid>:<n>" */
	uint8		kind;			/* RlockKind: with key and owner, */
	uint8		mode;			/* and the kind's mode, who it is */
	int			keylen;
	int			prefixlen;		/* the owner's rlock.key_prefix, in key */
	int			pid;			/* the owning backend, for the views */
	Oid			userid;

	/* written by the owning backend */
	bool		pinned;			/* the backend has holds or a request */
	int32		to_release;		/* holds given back, not yet sent */
	int64		lease_ms;		/* lease of the newest remaining hold */
	bool		renew;			/* some remaining hold uses the watchdog */
	int32		nsession;		/* the backend's holds by scope, */
	int32		nxact;			/* for the views */
	int64		token;			/* newest fencing token held, 0 if none */
	TimestampTz acquired_at;	/* when the backend's holds began */

	/* written by the worker */
	int32		worker_refs;	/* requests the worker works on for it */
	int32		count;			/* holds in Redis after what was sent, in
								 * the amounts of requests granted (a
								 * command names count times the kind's
								 * step) */
	bool		acquiring;		/* an acquire is on the wire, */
	int32		adding;			/* adding this much to count */
	int32		unacked;		/* releases on the wire */
	bool		resync;			/* re-assert count in Redis */
	bool		lost;			/* Redis was seen without the owner's holds
								 * (set by the worker, cleared by the
								 * backend once it has taken note) */
	TimestampTz expires_at;		/* lease end as last set, 0 if unknown */
	uint32		epoch;			/* cmd_epoch when Redis confirmed it */
	uint32		track_epoch;	/* the tracking epoch under which Redis
								 * announces any change of its key, 0 if
								 * none (worker/track.c) */

	bool		queued;			/* sits in the ring; set by either side */

	char		key[FLEXIBLE_ARRAY_MEMBER];
} RlockHold;

/*
 * The ring carries work for the worker in the order it was queued: a slot
 * with a request (or a request given up), or a hold entry with releases.
 * Items >= 0 are hold entries, items < 0 are slots (-1 - slot).  Each slot
 * and each entry is in the ring at most once (their queued flags), so the
 * ring never overflows.
 */
typedef struct RlockRing
{
	slock_t		mutex;
	uint32		head;			/* next item to take */
	uint32		tail;			/* next free position */
	uint32		size;
	int			items[FLEXIBLE_ARRAY_MEMBER];
} RlockRing;

/*
 * Counters since start (or the last rlock_stats_reset()), incremented by
 * backends and the worker alike without a lock.
 */
typedef enum RlockCounter
{
	RLOCK_STAT_ACQUIRED,		/* acquires granted */
	RLOCK_STAT_REFUSED,			/* busy, and no wait was asked for */
	RLOCK_STAT_TIMED_OUT,		/* busy until the wait or lock_timeout ran out */
	RLOCK_STAT_CANCELLED,		/* acquires interrupted (cancel, timeouts) */
	RLOCK_STAT_FAILED,			/* acquires that ended in an error */
	RLOCK_STAT_RELEASED,		/* holds given back */
	RLOCK_STAT_LOST,			/* locks found lost while held */
	RLOCK_STAT_RENEWALS,		/* leases renewed by the watchdog */
	RLOCK_STAT_RENEWAL_CALLS,	/* renewal script calls */
	RLOCK_STAT_RECONNECTS,		/* connections made again after a loss */
	RLOCK_STAT_REDIS_ERRORS,	/* error replies from Redis */
	RLOCK_STAT_SUBSCRIPTIONS,	/* channels subscribed */
	RLOCK_STAT_UNLOCK_MESSAGES, /* unlock messages received */
	RLOCK_STAT_CLUSTER_MOVED,	/* MOVED redirections followed */
	RLOCK_STAT_CLUSTER_ASK,		/* ASK redirections followed */
	RLOCK_STAT_CLUSTER_RETRIES, /* TRYAGAIN and CLUSTERDOWN answers */
	RLOCK_NCOUNTERS
} RlockCounter;

/* Latencies kept as histograms */
typedef enum RlockLatency
{
	RLOCK_LATENCY_ROUND_TRIP,	/* command sent to reply read */
	RLOCK_LATENCY_ACQUIRE,		/* granted acquire, waiting included */
	RLOCK_NLATENCIES
} RlockLatency;

#define RLOCK_LATENCY_BUCKETS	18

typedef struct RlockHistogram
{
	pg_atomic_uint64 count;
	pg_atomic_uint64 sum_us;
	pg_atomic_uint64 max_us;
	pg_atomic_uint64 buckets[RLOCK_LATENCY_BUCKETS];
} RlockHistogram;

typedef struct RlockStats
{
	pg_atomic_uint64 counters[RLOCK_NCOUNTERS];
	RlockHistogram latency[RLOCK_NLATENCIES];
	pg_atomic_uint64 reset_at;	/* TimestampTz of the last reset */
} RlockStats;

/* States of a Redis connection, as rlock_status() shows them */
typedef enum RlockConnState
{
	RLOCK_CONN_DOWN,			/* no connection; next attempt at retry_at */
	RLOCK_CONN_RESOLVING,		/* waiting for the host name to resolve */
	RLOCK_CONN_CONNECTING,		/* connect(2) in progress */
	RLOCK_CONN_SECURING,		/* the TLS handshake */
	RLOCK_CONN_HANDSHAKE,		/* AUTH, SELECT and script loading */
	RLOCK_CONN_READY
} RlockConnState;

/*
 * What the worker says about its connections, for rlock_status().  The
 * worker alone writes it, bumping changecount before and after (odd while
 * writing); readers copy it and retry until they see the same even count
 * on both sides.
 */
/* The pub/sub namespaces unlock messages use (rlock.cluster_pubsub) */
#define RLOCK_PUBSUB_CLASSIC	0x01	/* SUBSCRIBE, PUBLISH */
#define RLOCK_PUBSUB_SHARDED	0x02	/* SSUBSCRIBE, SPUBLISH */

typedef struct RlockWorkerStatus
{
	pg_atomic_uint32 changecount;
	int			cmd_state;		/* RlockConnState */
	int			sub_state;
	TimestampTz cmd_since;		/* when it last became READY, or went down */
	TimestampTz sub_since;
	char		address[RLOCK_ADDRESS_LEN];
	char		redis_version[32];
	char		redis_role[16];
	char		last_error[RLOCK_DETAIL_LEN];
	TimestampTz last_error_at;
	int			channels;		/* channels subscribed now */
	int			topology;		/* RlockTopology */
	int			sync_state;		/* RlockConnState; -1 when not in use */
	int			replicas;		/* the primary's replicas; -1 if not known */
	char		sync_wait[64];	/* what an acquisition waits for now */
	int			sync_acks;		/* the latest WAIT's answer, -1 if none */
	char		sync_failure[RLOCK_DETAIL_LEN];	/* the latest acquisition
												 * undone for too few
												 * confirmations */
	TimestampTz sync_failure_at;
	char		sentinel[RLOCK_ADDRESS_LEN];	/* the Sentinel asked, "" if
												 * none */
	int			sentinels_known;
	int			sentinels_reachable;
	char		last_switch[2 * RLOCK_ADDRESS_LEN + 8];	/* "old -> new" */
	TimestampTz last_switch_at;
	char		cluster_node[RLOCK_ADDRESS_LEN];	/* asked for the map */
	int			cluster_primaries;	/* in the latest slot map */
	bool		cluster_map_known;
	int			cluster_pubsub; /* RLOCK_PUBSUB_* in use, 0 if none */
} RlockWorkerStatus;

/* The fixed part of rlock's shared memory */
typedef struct RlockShared
{
	slock_t		mutex;			/* protects the worker fields */
	Latch	   *worker_latch;	/* NULL while no worker runs */
	pid_t		worker_pid;
	int64		cmd_client_id;	/* Redis CLIENT ID of the latest command
								 * connection, 0 if unknown */
	char		cmd_run_id[RLOCK_RUN_ID_LEN + 1];	/* run_id of the Redis
													 * server that gave it */
	int64		sync_client_id; /* the same for the sync connection */
	char		sync_run_id[RLOCK_RUN_ID_LEN + 1];

	char		uuid[RLOCK_UUID_LEN + 1];	/* owner prefix of this instance */
	pg_atomic_uint64 next_owner_id;
	pg_atomic_uint32 cmd_epoch;	/* bumped whenever the command connection
								 * is lost and a worker starts or exits */
	pg_atomic_uint64 cmd_reply_at;	/* when the command connection last
									 * answered anything */
	pg_atomic_uint32 track_epoch;	/* client-side tracking armed under
									 * this epoch, 0 if not armed */
	pg_atomic_uint64 track_fresh_at;	/* every change Redis made before a
										 * command sent then has been
										 * announced and handled */

	int			nslots;
	Size		slot_size;
	int			nholds;
	Size		hold_size;

	slock_t		holds_mutex;	/* protects the free list */
	int			free_hold;		/* first free entry, or -1 */
	int			nfree;			/* entries on the free list */

	char	   *slots;			/* nslots slots of slot_size bytes */
	char	   *holds;			/* nholds entries of hold_size bytes */
	RlockRing  *ring;

	RlockStats	stats;
	RlockWorkerStatus status;

	LWLock	   *deadlock_lock;	/* one deadlock check at a time
								 * (backend/deadlock.c) */
} RlockShared;

/* shmem.c */
extern RlockShared *rlock_shared;

extern void rlock_shmem_request(void);
extern void rlock_shmem_startup(void);
extern RlockSlot *rlock_slot(int index);
extern RlockHold *rlock_hold(int index);
extern void rlock_ring_push(int item);
extern bool rlock_ring_pop(int *item);
extern void rlock_wake_worker(void);

/*
 * holdtable.c: every change of a hold entry's fields under its mutex, as
 * named transitions that assert the state they expect.  Nothing outside
 * src/shared takes an entry's mutex: readers copy an entry with
 * rlock_hold_read().
 */

/*
 * Is "h" the entry allocated with "generation", still in use?  h is an
 * entry whose mutex the caller holds (in holdtable.c), or a copy made by
 * rlock_hold_read().
 */
static inline bool
rlock_hold_is_current(const RlockHold *h, uint32 generation)
{
	return h->in_use && h->generation == generation;
}

extern void rlock_hold_read(int index, RlockHold *copy);
extern char *rlock_hold_copy_key(int index, uint32 generation, int *keylen,
								 int *prefixlen);

/* the owning backend */
#define RLOCK_HOLD_TABLE_FULL		(-1)
#define RLOCK_HOLD_TABLE_RESERVED	(-2)
extern int	rlock_hold_alloc(uint64 owner_id, RlockKind kind, int mode,
							 const char *key, int keylen, int prefixlen,
							 int reserved, uint32 *generation);
extern bool rlock_hold_pin(int index, uint32 generation);
extern void rlock_hold_unpin(int index);
extern void rlock_hold_publish(int index, int32 nsession, int32 nxact,
							   int64 token, TimestampTz acquired_at);
extern void rlock_hold_describe(int index, int64 lease_ms, bool renew);
extern bool rlock_hold_take_loss(int index);

/* either side */
extern void rlock_queue_release(int index, int count, int64 lease_ms,
								bool renew);
extern bool rlock_hold_try_free(int index);

/* the worker */
extern bool rlock_hold_ref(int index, uint32 generation);
extern void rlock_hold_unref(int index);
extern int32 rlock_hold_acquire_begin(int index, int32 amount);
extern bool rlock_hold_grant(int index, int32 count, TimestampTz expires,
							 bool confirming, bool lost);
extern bool rlock_hold_refuse(int index, bool doubt, bool lost);
extern void rlock_hold_settle(int index, int32 count, bool confirmed);
extern int32 rlock_hold_added(int index);
extern bool rlock_hold_dequeue(int index, bool may_send, int32 *target,
							   int64 *lease_ms);
extern void rlock_hold_release_unsent(int index);
extern bool rlock_hold_released(int index, bool again, RlockStatus status,
								int32 target, TimestampTz expires);
extern bool rlock_hold_requeue(int index);
extern bool rlock_hold_recover(int index);
extern bool rlock_hold_lose(int index, uint32 generation, bool *newly);
extern bool rlock_hold_extend(int index, uint32 generation,
							  TimestampTz expires, bool extend_only);
extern void rlock_hold_track(int index, uint32 generation, uint32 epoch);
extern void rlock_hold_untrack(int index, uint32 generation);

/* vouch.c: may Redis's last word on holds stand for asking again */
extern TimestampTz rlock_fresh_after(TimestampTz now);
extern bool rlock_vouching(TimestampTz now, bool tracked,
						   TimestampTz fresh_after, uint32 *track_epoch);
extern bool rlock_hold_vouches(const RlockHold *h, uint32 track_epoch,
							   TimestampTz enough);
extern bool rlock_hold_vouches_now(const RlockHold *h, uint32 track_epoch,
								   TimestampTz enough);

/* stats.c: counters, latencies and the worker's status */
extern void rlock_stats_init(void);
extern void rlock_stats_reset(void);
extern void rlock_count(RlockCounter counter, uint64 n);
extern void rlock_latency(RlockLatency latency, int64 us);
extern const int64 rlock_latency_bounds[RLOCK_LATENCY_BUCKETS - 1];
extern void rlock_status_begin_write(void);
extern void rlock_status_end_write(void);
extern void rlock_status_read(RlockWorkerStatus *copy);

/*
 * A byte string by reference, used as the key of dynahash tables that are
 * keyed by a lock key or a channel name (see rlock_keyref_table).
 */
typedef struct RlockKeyRef
{
	const char *data;
	int			len;
} RlockKeyRef;

/* names.c: kind names; Redis key, channel and owner names */
extern const char *const rlock_kind_names[RLOCK_NKINDS];
extern int	rlock_derived_name(char *buf, const char *prefix, const char *key,
							   int keylen);
extern int	rlock_channel_name(char *buf, const char *key, int keylen);
extern int	rlock_suffixed_name(char *buf, const char *key, int keylen,
								const char *suffix);
extern int	rlock_token_name(char *buf, const char *key, int keylen);
extern int	rlock_yield_name(char *buf, const char *key, int keylen);
extern int	rlock_owner_name(char *buf, uint64 owner_id);
extern char *rlock_sql_key(const char *key, int keylen, int prefixlen);
extern char *rlock_sql_text(const char *s, int len);
#define RLOCK_INSTANCE_NAME_LEN	128
extern void rlock_instance_display_name(char *buf, int buflen);
/* room for the longest derived name (a latch's channel) of a key */
#define RLOCK_CHANNEL_MAXLEN(keylen)	(sizeof(RLOCK_LATCH_PREFIX) + (keylen) + 2)
#define RLOCK_OWNER_MAXLEN				(RLOCK_UUID_LEN + 22)
/*
 * A session's owner number n steps by RLOCK_OWNER_STEP, and its holds in
 * a kind's mode m are the hash field of number n + m: a session holding
 * a key exclusively and shared has two fields in it, as a Redisson
 * thread holding both halves of a read-write lock has.
 */
#define RLOCK_OWNER_STEP		2
#define RLOCK_MODE_EXCLUSIVE	0
#define RLOCK_MODE_SHARED		1
#define RLOCK_OWNER_FIELD(owner_id, mode)	((owner_id) + (uint64) (mode))
extern HTAB *rlock_keyref_table(const char *name, Size entrysize,
								MemoryContext cxt);

/* pgwaits.c: a process's wait for a PostgreSQL lock, and who blocks it */
typedef struct RlockPgWait
{
	char	   *what;			/* "ShareLock on transaction 740" */
	TimestampTz since;			/* when the wait began */
	int			nblockers;
	int		   *blockers;		/* lock group leaders' pids */
} RlockPgWait;
extern bool rlock_pg_wait(int pid, RlockPgWait *wait);

/* slots.c: Redis Cluster hash slots; names.c: names that fit their slot */
#define RLOCK_CLUSTER_SLOTS		16384
extern int	rlock_key_slot(const char *key, int keylen);
extern bool rlock_name_fits_slot(const char *key, int keylen);

#endif							/* RLOCK_SHARED_H */
