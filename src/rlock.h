/*-------------------------------------------------------------------------
 *
 * rlock.h
 *		Declarations shared by the files of rlock: settings, the shared
 *		memory layout, the backend side of the request path and the worker.
 *
 * rlock gives SQL sessions distributed locks stored in Redis, laid out the
 * way Redisson lays out its RLock.  Backends never talk to Redis: they hand
 * requests to one background worker per instance through per-backend slots
 * in shared memory, and queue the releases of their holds on a ring that
 * the worker drains in order.  The locking protocol for every shared field
 * is described in shmem.c.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/rlock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_H
#define RLOCK_H

#include "datatype/timestamp.h"
#include "lib/ilist.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"

/* Length of a canonical textual UUID, without the terminator */
#define RLOCK_UUID_LEN		36

/* Redis names a server process by 40 hex digits (INFO server, run_id) */
#define RLOCK_RUN_ID_LEN	40

/* Room for an error text handed from the worker to a backend */
#define RLOCK_DETAIL_LEN	512

/* Room for a server address in messages: host (NI_MAXHOST) and port */
#define RLOCK_ADDRESS_LEN	(1025 + 16)

/* Names derived from a lock key: this prefix plus the key, in braces */
#define RLOCK_CHANNEL_PREFIX	"redisson_lock__channel:"
#define RLOCK_TOKEN_PREFIX		"redisson_lock_token:"

/*
 * Settings (rlock.c).  The worker reads the connection settings; backends
 * read the limits and the timeouts that bound their own waits.
 */
extern char *rlock_host;
extern int	rlock_port;
extern char *rlock_unix_socket;
extern int	rlock_database;
extern char *rlock_username;
extern char *rlock_password_file;
extern char *rlock_key_prefix;
extern int	rlock_connect_timeout;
extern int	rlock_command_timeout;
extern int	rlock_watchdog_timeout;
extern int	rlock_max_key_length;
extern int	rlock_max_locks;
extern int	rlock_verify_at_commit;

/* rlock.verify_at_commit */
typedef enum RlockVerify
{
	RLOCK_VERIFY_OFF,
	RLOCK_VERIFY_ON,			/* ask Redis unless its last word covers it */
	RLOCK_VERIFY_ALWAYS			/* ask Redis at every commit */
} RlockVerify;
extern int	rlock_verify_margin;

/*
 * What a request asks for.  Releases at transaction end do not use a
 * request: they go through the release ring (see shmem.c).
 */
typedef enum RlockOp
{
	RLOCK_OP_ACQUIRE,			/* take one hold, waiting up to a deadline */
	RLOCK_OP_RELEASE,			/* give back one hold and report the outcome */
	RLOCK_OP_EXISTS,			/* is the key held by anyone */
	RLOCK_OP_PTTL,				/* remaining lease of the key */
	RLOCK_OP_BARRIER,			/* answered once everything before it is */
	RLOCK_OP_VERIFY				/* are the session's holds still there */
} RlockOp;

/*
 * The kind of lock a request or hold is about.  Every kind has its own
 * Redis layout and scripts; the request path is the same for all.
 */
typedef enum RlockKind
{
	RLOCK_KIND_PLAIN			/* Redisson RLock: reentrant exclusive lock */
} RlockKind;

/* Outcome of a request, written by the worker */
typedef enum RlockStatus
{
	RLOCK_STATUS_NONE,
	RLOCK_STATUS_OK,			/* done; for ACQUIRE: the hold was granted */
	RLOCK_STATUS_BUSY,			/* ACQUIRE: still held by another owner */
	RLOCK_STATUS_NOT_HELD,		/* RELEASE: Redis no longer had the hold */
	RLOCK_STATUS_CONNECTION,	/* Redis unreachable or not answering */
	RLOCK_STATUS_REDIS_ERROR,	/* Redis answered with an error */
	RLOCK_STATUS_SHUTDOWN		/* the worker exited before answering */
} RlockStatus;

/* Life of a request slot; see shmem.c for who moves it where */
typedef enum RlockSlotState
{
	RLOCK_SLOT_IDLE,			/* no request, or one the backend gave up */
	RLOCK_SLOT_PENDING,			/* submitted, not yet taken by the worker */
	RLOCK_SLOT_TAKEN,			/* the worker works on it */
	RLOCK_SLOT_DONE				/* the result is ready */
} RlockSlotState;

/*
 * One request slot per backend, indexed by MyBackendId - 1.  The key buffer
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
	RlockOp		op;
	RlockKind	kind;
	uint64		owner_id;		/* the requesting session's owner number */
	int			hold;			/* hold entry, or -1 */
	uint32		hold_generation;	/* of that entry, as the backend knows it */
	TimestampTz wait_until;		/* ACQUIRE: give up after this; 0 = never */
	int64		lease_ms;		/* ACQUIRE: lease, 0 = the watchdog;
								 * VERIFY: the safety margin */
	bool		want_token;		/* ACQUIRE: count a fencing token */
	bool		session;		/* ACQUIRE: for a session-scoped hold */
	int			pid;			/* the owning backend, for the views */
	Oid			userid;
	TimestampTz submitted_at;

	/* set by the worker: ACQUIRE found the lock busy and waits */
	bool		busy;

	/* the result: written by the worker before it becomes DONE */
	RlockStatus status;
	int64		value;			/* ACQUIRE: the token; VERIFY: holds lost;
								 * EXISTS, PTTL: Redis's answer */
	char		detail[RLOCK_DETAIL_LEN];

	int			keylen;
	char		key[FLEXIBLE_ARRAY_MEMBER];
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
	RlockKind	kind;
	int			keylen;
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
	int32		count;			/* hold count in Redis after what was sent */
	bool		acquiring;		/* an acquire is on the wire */
	int32		unacked;		/* releases on the wire */
	bool		resync;			/* re-assert count in Redis */
	bool		lost;			/* Redis was seen without the owner's holds
								 * (set by the worker, cleared by the
								 * backend once it has taken note) */
	TimestampTz expires_at;		/* lease end as last set, 0 if unknown */
	uint32		epoch;			/* cmd_epoch when Redis confirmed it */

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

/*
 * What the worker says about its connections, for rlock_status().  The
 * worker alone writes it, bumping changecount before and after (odd while
 * writing); readers copy it and retry until they see the same even count
 * on both sides.
 */
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

	char		uuid[RLOCK_UUID_LEN + 1];	/* owner prefix of this instance */
	pg_atomic_uint64 next_owner_id;
	pg_atomic_uint32 cmd_epoch;	/* bumped whenever the command connection
								 * is lost and a worker starts or exits */
	pg_atomic_uint64 cmd_reply_at;	/* when the command connection last
									 * answered anything */

	int			nslots;
	Size		slot_size;
	int			nholds;
	Size		hold_size;

	slock_t		holds_mutex;	/* protects the free list */
	int			free_hold;		/* first free entry, or -1 */

	char	   *slots;			/* nslots slots of slot_size bytes */
	char	   *holds;			/* nholds entries of hold_size bytes */
	RlockRing  *ring;

	RlockStats	stats;
	RlockWorkerStatus status;
} RlockShared;

/* shmem.c */
extern RlockShared *rlock_shared;

/*
 * Redis confirmed that an entry's holds last until "expires" (the worker,
 * holding the entry's mutex).  Only a confirmation on the current command
 * connection lets a commit do without asking again (holds.c).
 */
static inline void
rlock_hold_confirm(RlockHold *h, TimestampTz expires)
{
	h->expires_at = expires;
	h->epoch = pg_atomic_read_u32(&rlock_shared->cmd_epoch);
}

extern void rlock_shmem_request(void);
extern void rlock_shmem_startup(void);
extern RlockSlot *rlock_slot(int index);
extern RlockHold *rlock_hold(int index);
extern void rlock_ring_push(int item);
extern bool rlock_ring_pop(int *item);
extern int	rlock_hold_alloc(uint64 owner_id, RlockKind kind,
							 const char *key, int keylen, uint32 *generation);
extern void rlock_hold_publish(int index, int32 nsession, int32 nxact,
							   int64 token, TimestampTz acquired_at);
extern bool rlock_hold_pin(int index, uint32 generation);
extern bool rlock_hold_is_current(int index, uint32 generation);
extern void rlock_hold_unpin(int index);
extern void rlock_hold_describe(int index, int64 lease_ms, bool renew);
extern bool rlock_hold_take_loss(int index);
extern bool rlock_hold_try_free(int index);
extern void rlock_queue_release(int index, int count, int64 lease_ms,
								bool renew);
extern void rlock_wake_worker(void);

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
 * keyed by a lock key or a channel name (with rlock_keyref_hash/match).
 */
typedef struct RlockKeyRef
{
	const char *data;
	int			len;
} RlockKeyRef;

/* names.c: Redis key, channel and owner names */
extern int	rlock_channel_name(char *buf, const char *key, int keylen);
extern int	rlock_token_name(char *buf, const char *key, int keylen);
extern int	rlock_owner_name(char *buf, uint64 owner_id);
extern char *rlock_sql_key(const char *key, int keylen);
/* room for the longest derived name (the channel) of a key */
#define RLOCK_CHANNEL_MAXLEN(keylen)	(sizeof(RLOCK_CHANNEL_PREFIX) + (keylen) + 2)
#define RLOCK_OWNER_MAXLEN				(RLOCK_UUID_LEN + 22)
extern uint32 rlock_keyref_hash(const void *key, Size keysize);
extern int	rlock_keyref_match(const void *key1, const void *key2,
							   Size keysize);

/* functions.c */
extern void rlock_check_loaded(void);

/* holds.c: the backend's holds and the transaction callbacks */
extern RlockStatus rlock_acquire(const char *key, int keylen, bool session,
								 TimestampTz wait_until, int64 lease_ms,
								 bool use_lock_timeout, bool want_token,
								 int64 *token);
extern RlockStatus rlock_release_one(const char *key, int keylen,
									 bool session, bool *found);
extern int	rlock_release_session_all(RlockStatus *status);
extern int	rlock_held_count(const char *key, int keylen);
extern int64 rlock_held_token(const char *key, int keylen);

/* request.c: the backend side of the request path */
extern uint64 rlock_my_owner_id(void);
/* A request as a backend makes it (see RlockSlot for the fields) */
typedef struct RlockRequest
{
	RlockOp		op;
	RlockKind	kind;
	int			hold;			/* -1 if none */
	uint32		hold_generation;
	const char *key;			/* EXISTS, PTTL */
	int			keylen;
	TimestampTz wait_until;
	int64		lease_ms;
	bool		want_token;
	bool		session;		/* ACQUIRE: for a session-scoped hold */
	bool		use_lock_timeout;	/* lock_timeout applies to the wait */
} RlockRequest;

extern RlockStatus rlock_request(const RlockRequest *req, int64 *value);
extern void rlock_abandon_request(void);
extern void rlock_report_status(RlockStatus status, const char *key,
								int keylen);

/*---- worker side ----*/

/* What a command on the wire is for, so its reply can be dispatched */
typedef enum RlockCmdType
{
	RLOCK_CMD_HANDSHAKE,		/* AUTH, SELECT, CLIENT SETNAME */
	RLOCK_CMD_SCRIPT_LOAD,		/* SCRIPT LOAD of script "index" */
	RLOCK_CMD_ACQUIRE,			/* acquire script for a request */
	RLOCK_CMD_RELEASE,			/* release script for a hold entry */
	RLOCK_CMD_QUERY,			/* EXISTS, PTTL or PING for a request */
	RLOCK_CMD_RENEW,			/* renewal script for a batch of entries */
	RLOCK_CMD_VERIFY,			/* verify script for a batch of a request */
	RLOCK_CMD_SUBSCRIBE,		/* expects one subscribe confirmation */
	RLOCK_CMD_UNSUBSCRIBE,		/* expects one unsubscribe confirmation */
	RLOCK_CMD_PING,				/* keeps an idle connection checked */
	RLOCK_CMD_SERVER_INFO		/* ROLE, for rlock_status() */
} RlockCmdType;

/* Handshake commands whose failure does not fail the connection */
#define RLOCK_HANDSHAKE_OPTIONAL	(-1)	/* CLIENT SETNAME */
#define RLOCK_HANDSHAKE_CLIENT_ID	(-2)	/* CLIENT ID: remember it */
#define RLOCK_HANDSHAKE_FENCE		(-3)	/* CLIENT KILL ID of the last one */
#define RLOCK_HANDSHAKE_INFO		(-4)	/* INFO server: version, run_id */

/*
 * A command sent and not yet answered.  Each connection keeps its commands
 * in send order; Redis answers in that order.
 */
typedef struct RlockCmd
{
	dlist_node	node;
	RlockCmdType type;
	TimestampTz sent_at;
	int			index;			/* script (SCRIPT_LOAD); a negative one
								 * marks a handshake command allowed to
								 * fail (RLOCK_HANDSHAKE_*) */
	int			slot;			/* request commands: slot and request */
	uint64		seq;
	int			hold;			/* ACQUIRE, RELEASE: the hold entry */
	int32		target;			/* ACQUIRE, RELEASE: count to leave;
								 * VERIFY: the sending it belongs to */
	int64		lease_ms;		/* ACQUIRE, RELEASE, RENEW: lease sent;
								 * VERIFY: the margin */
	int			nholds;			/* RENEW, VERIFY: entries in the batch */
	int		   *holds;			/* RENEW, VERIFY: entry and generation pairs */
} RlockCmd;

typedef enum RlockConnState
{
	RLOCK_CONN_DOWN,			/* no connection; next attempt at retry_at */
	RLOCK_CONN_RESOLVING,		/* waiting for the host name to resolve */
	RLOCK_CONN_CONNECTING,		/* connect(2) in progress */
	RLOCK_CONN_HANDSHAKE,		/* AUTH, SELECT and script loading */
	RLOCK_CONN_READY
} RlockConnState;

struct redisAsyncContext;
struct RlockServer;

/* One hiredis connection and its place in the worker's wait set */
typedef struct RlockConn
{
	const char *role;			/* "command" or "subscriber", for messages */
	bool		subscriber;
	struct RlockServer *server;
	struct redisAsyncContext *ac;	/* NULL while there is no connection */
	RlockConnState state;
	uint32		want;			/* socket events hiredis asked for */
	uint32		registered;		/* socket events in the wait set */
	int			pos;			/* position in the wait set, -1 if none */
	int			handshake;		/* handshake replies still expected */
	char		run_id[RLOCK_RUN_ID_LEN + 1];	/* of the server, "" if not
												 * known */
	bool		failed;			/* a callback found the connection unusable */
	TimestampTz deadline;		/* connect and handshake must end by then */
	TimestampTz retry_at;		/* next attempt while DOWN */
	int			backoff_ms;
	dlist_head	inflight;		/* RlockCmd in send order */
	char		error[RLOCK_DETAIL_LEN];	/* why it is not READY */
	TimestampTz ready_at;		/* when it last became READY */
	TimestampTz since;			/* when it last became READY or was lost */
	bool		ever_ready;		/* was READY before: the next one counts
								 * as a reconnection */
	TimestampTz last_sent_at;	/* when the latest command was queued */
	bool		outage_logged;	/* the current outage was logged */
	bool		ready_logged;	/* and so was its end */
	bool		flap_logged;	/* losses right after READY were logged */
} RlockConn;

/* conn.c */
extern struct RlockServer *rlock_server;
extern void rlock_conn_init(void);
extern void rlock_conn_reload(void);
extern RlockConn *rlock_cmd_conn(void);
extern RlockConn *rlock_sub_conn(void);
extern const char *rlock_server_address(void);
extern void rlock_conn_tick(TimestampTz now);
extern TimestampTz rlock_conn_next_tick(void);
extern void rlock_conn_wait(long timeout_ms);
extern void rlock_conn_flush(void);
extern bool rlock_conn_send(RlockConn *conn, RlockCmd *cmd, int argc,
							const char **argv, const size_t *argvlen);
extern void rlock_conn_drop(RlockConn *conn, const char *reason);
extern void rlock_conn_keepalive(bool on);
extern void rlock_status_error(const char *msg);
extern void rlock_status_touch(void);
extern void rlock_status_publish(void);
extern RlockCmd *rlock_cmd_new(RlockCmdType type);
extern void rlock_cmd_free(RlockCmd *cmd);

/* scripts.c */
typedef enum RlockScript
{
	RLOCK_SCRIPT_ACQUIRE,
	RLOCK_SCRIPT_RELEASE,
	RLOCK_SCRIPT_RENEW,
	RLOCK_SCRIPT_VERIFY,
	RLOCK_NSCRIPTS
} RlockScript;
extern void rlock_scripts_load(RlockConn *conn);
extern bool rlock_script_loaded(int index, const char *sha, int len);
extern bool rlock_script_missing(const char *error);
extern const char *rlock_script_sha(RlockScript script);

/* worker.c */
extern PGDLLEXPORT void rlock_worker_main(Datum main_arg);
extern void rlock_worker_reply(RlockConn *conn, RlockCmd *cmd, void *reply);
extern void rlock_worker_conn_ready(RlockConn *conn);
extern void rlock_worker_conn_lost(RlockConn *conn);
extern bool rlock_worker_retry(int slot, const char *key, int keylen);
extern bool rlock_worker_waiting(int slot, const char *key, int keylen);

/* owners.c */
extern void rlock_owners_init(void);
extern void rlock_owners_note(int index);
extern int	rlock_owners_holds(uint64 owner_id, const int **holds);
extern void rlock_owners_sweep(void);

/* waiters.c: local waiters and the subscriptions they share */
extern void rlock_waiters_init(int nslots);
extern void rlock_waiters_join(int slot, const char *key, int keylen);
extern bool rlock_waiters_leave(int slot, bool pass_wake, const char *key,
								int keylen);
extern uint64 rlock_waiters_wakes(int slot);
extern TimestampTz rlock_waiters_line(const char *key, int keylen);
extern void rlock_waiters_busy_until(int slot, const char *key, int keylen,
									 TimestampTz until);
#define RLOCK_HANDED_OFF		1
#define RLOCK_HANDED_OFF_ECHO	2
extern int	rlock_waiters_hand_off(const char *key, int keylen);
extern void rlock_waiters_echo_cancel(const char *key, int keylen);
extern void rlock_waiters_reply(RlockCmd *cmd, void *reply);
extern void rlock_waiters_message(const char *channel, int channellen,
								  const char *payload, int payloadlen);
extern void rlock_waiters_conn_ready(void);
extern void rlock_waiters_conn_lost(void);
extern int	rlock_waiters_channels(void);

/* renew.c: the watchdog, and the batches of entries it and VERIFY use */
#define RLOCK_BATCH		100
extern bool rlock_batch_send(RlockCmdType type, RlockScript script,
							 int64 arg_ms, const int *pairs, int n,
							 int slot, uint64 seq, int32 tag);
extern int	rlock_batch_apply(RlockCmd *cmd, void *reply, bool extend_only,
							  int *extended);
extern bool rlock_hold_mark_lost(RlockHold *h);
extern void rlock_renew_tick(TimestampTz now);
extern TimestampTz rlock_renew_next(void);
extern void rlock_renew_soon(void);
extern void rlock_renew_reply(RlockCmd *cmd, void *reply);

#endif							/* RLOCK_H */
