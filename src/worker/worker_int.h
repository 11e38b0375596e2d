/*-------------------------------------------------------------------------
 *
 * worker_int.h
 *		What the files of the worker share among themselves.  Nothing
 *		outside src/worker includes this; nothing here knows hiredis,
 *		OpenSSL or a socket.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/worker_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_WORKER_INT_H
#define RLOCK_WORKER_INT_H

#include "lib/ilist.h"
#include "lib/pairingheap.h"
#include "nodes/pg_list.h"

#include "kinds/kinds.h"
#include "redis/redis.h"
#include "shared/shared.h"
#include "worker/worker.h"

/* What a command of the worker is for, so its reply can be dispatched */
typedef enum WorkerCmdType
{
	WORKER_CMD_ACQUIRE,			/* acquire script for a request */
	WORKER_CMD_RELEASE,			/* release script for a hold entry */
	WORKER_CMD_QUERY,			/* EXISTS, PTTL or PING for a request */
	WORKER_CMD_RENEW,			/* renewal script for a batch of entries */
	WORKER_CMD_VERIFY,			/* verify script for a batch of a request */
	WORKER_CMD_SUBSCRIBE,		/* expects one subscribe confirmation */
	WORKER_CMD_UNSUBSCRIBE,		/* expects one unsubscribe confirmation */
	WORKER_CMD_REGISTER,		/* this instance's registry entry */
	WORKER_CMD_SYNC,			/* WAIT after an acquire on the sync
								 * connection */
	WORKER_CMD_PUBLISH,			/* an unlock message, a yield of our own
								 * or a waiter leaving a queue (give_up);
								 * the reply does not matter */
	WORKER_CMD_TRACK,			/* client-side tracking (track.c) */
	WORKER_CMD_TRANSFER,		/* a release that hands the lock to a
								 * local waiter (transfer.c) */
	WORKER_CMD_ACQUIRE_SET,		/* the acquire_set script for a request */
	WORKER_CMD_WFG				/* this instance's part of the wait-for
								 * graph, and the search (wfg.c) */
} WorkerCmdType;

/*
 * A command of the worker on the wire.  Allocated from a slab
 * (worker_cmd_new), freed when its reply has been handled.
 */
typedef struct WorkerCmd
{
	RlockCmd	cmd;			/* the Redis layer's part; first */
	WorkerCmdType type;
	int			slot;			/* request commands: slot and request */
	uint64		seq;			/* ...; (UN)SUBSCRIBE: number in its group */
	int			hold;			/* ACQUIRE, RELEASE: the hold entry;
								 * TRANSFER: the one taking the lock */
	int			from_hold;		/* TRANSFER: the entry giving the lock */
	int32		target;			/* ACQUIRE, RELEASE, TRANSFER: count to
								 * leave (the taker's);
								 * VERIFY: the sending it belongs to */
	int64		lease_ms;		/* ACQUIRE, RELEASE, RENEW: lease sent;
								 * VERIFY: the margin */
	bool		want_token;		/* ACQUIRE: a fencing token was asked for */
	int			handoff;		/* RELEASE: RLOCK_HANDED_OFF* */
	RlockKind	kind;			/* RENEW, VERIFY: of every entry in the batch */
	int			nholds;			/* RENEW, VERIFY: entries in the batch;
								 * ACQUIRE_SET: in the set */
	int		   *holds;			/* RENEW, VERIFY, ACQUIRE_SET: entry and
								 * generation pairs */
	void	   *group;			/* (UN)SUBSCRIBE: the waiters' group */
	uint64		sync_tag;		/* ACQUIRE, SYNC: pairs an acquire with its
								 * WAIT; 0 for an acquire not synced */
	int			sync_need;		/* ACQUIRE, SYNC: confirmations needed */
	int64		sync_value;		/* ACQUIRE: what its grant answered */
	RlockConn  *sent_on;		/* the connection it was sent on (a Redis
								 * Cluster may answer it on another) */
	uint32		track_epoch;	/* tracking's epoch when it was sent */
	uint64		track_mark;		/* ACQUIRE: its mark (track.c), or 0 */
	uint64		track_tag;		/* ACQUIRE: its mark's random tag */
	uint32		track_writes;	/* ACQUIRE: commands sent so far that write
								 * its hold's key, itself included */
} WorkerCmd;

/* worker.c */
extern MemoryContext rlock_worker_context;
extern bool rlock_worker_stopping;
extern WorkerCmd *worker_cmd_new(WorkerCmdType type);
extern void worker_cmd_free(WorkerCmd *wc);
extern bool worker_cmd_send(RlockConn *conn, WorkerCmd *wc, RlockArgs *args);
extern RlockArgs *worker_args(void);
extern int64 worker_lease(int64 lease_ms);
extern void worker_unknown_status(RlockConn *conn, const WorkerCmd *wc,
								  RlockKind kind);

/*
 * The worker's side of a request.  A request moves PENDING -> INFLIGHT ->
 * answered (NONE), or WAITING between tries (requests.c says when).
 */
typedef enum ReqState
{
	REQ_NONE,					/* no request for this slot */
	REQ_PENDING,				/* to be sent when the connection allows */
	REQ_INFLIGHT,				/* its command is on the wire */
	REQ_WAITING					/* ACQUIRE: the lock is busy; RELEASE and
								 * BARRIER: a release they cover is still
								 * to be answered */
} ReqState;

/* The worker's copy of a slot's request, one per slot */
typedef struct WorkerReq
{
	ReqState	state;
	uint64		seq;
	RlockRequestArgs args;		/* as its backend asked (the slot's) */
	bool		hold_counted;	/* counted in the entry's worker_refs */
	char	   *key;			/* the key of args.keylen bytes, or NULL */
	int		   *set;			/* ACQUIRE_SET: args.nset entry and
								 * generation pairs, each counted in its
								 * entry's worker_refs; else NULL */
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
	bool		queued;			/* ACQUIRE: a try that may have put its
								 * owner in its kind's queue in Redis
								 * (give_up) was sent */
	int64		queue_ms;		/* ACQUIRE: the wait it queued for (ms,
								 * -1 without limit) */
	bool		granted;		/* ACQUIRE: answered with the lock */
	int			noscript;		/* NOSCRIPT retries so far */
	TimestampTz unanswered_since;	/* sending of the first command that
									 * went unanswered, 0 if none */
	int			quick_retries;	/* retries in a row without a wait */
	TimestampTz last_try_at;	/* when the latest try was sent */
	TimestampTz timer_at;		/* 0 = no timer */
	pairingheap_node timer_node;
	dlist_node	pending_node;
} WorkerReq;

/* requests.c: the life of a request */
extern void worker_requests_init(int nslots);
extern WorkerReq *worker_req(int slot);
extern int	worker_slot_of(WorkerReq *req);
extern void worker_set_state(WorkerReq *req, ReqState state);
extern void worker_timer_set(WorkerReq *req, TimestampTz at);
extern RlockConn *worker_req_sync_conn(WorkerReq *req);
extern void worker_make_pending(WorkerReq *req);
extern void worker_note_answered(WorkerReq *req);
extern void worker_note_unanswered(WorkerReq *req, WorkerCmd *wc);
extern void worker_forget(WorkerReq *req);
extern void worker_give_ups_flush(void);
extern WorkerReq *worker_current(WorkerCmd *wc);
extern bool worker_answer(int slot, uint64 seq, RlockStatus status,
						  int64 value, const char *detail);
extern void worker_complete(WorkerReq *req, RlockStatus status, int64 value,
							const char *detail);
extern void worker_complete_error(WorkerReq *req, const RlockReply *reply);
extern void worker_mark_busy(WorkerReq *req);
extern void worker_take_slot(int slot);
extern void worker_fire_timers(TimestampTz now);
extern TimestampTz worker_next_timer(void);
extern void worker_requests_conn_lost(RlockConn *conn);
extern void worker_requests_sync_lost(RlockConn *sync);
extern void worker_requests_stop(void);
extern bool worker_requests_waiting(void);
extern void worker_send_pending(void);
extern bool worker_parked(void);
extern void worker_unpark(void);

/* send.c: sending requests, and trying again */
extern RlockConn *worker_req_conn(WorkerReq *req);
extern bool worker_req_ready(WorkerReq *req);
extern RlockConn *worker_req_missing_conn(WorkerReq *req);
extern bool worker_owner_busy(WorkerReq *req, bool acquiring);
extern bool worker_release_refused_now(WorkerReq *req);
extern bool worker_may_send(WorkerReq *req);
extern void worker_send(WorkerReq *req);
extern void worker_retry_soon(WorkerReq *req);
extern bool worker_retry(int slot, const char *key, int keylen);
extern bool worker_retry_at(int slot, const char *key, int keylen,
							TimestampTz at);
extern bool worker_waiting(int slot, const char *key, int keylen);
extern bool worker_in_line(int slot, const char *key, int keylen);

/* replies.c: what the answers to requests mean */
extern void worker_grant(WorkerCmd *wc, WorkerReq *req, int64 value);
extern void worker_acquire_reply(RlockConn *conn, WorkerCmd *wc,
								 const RlockReply *reply);
extern void worker_acquire_set_reply(RlockConn *conn, WorkerCmd *wc,
									 const RlockReply *reply);
extern void worker_set_synced(WorkerCmd *wc, int64 acks);
extern void worker_verify_reply(RlockConn *conn, WorkerCmd *wc,
								const RlockReply *reply);
extern void worker_query_reply(RlockConn *conn, WorkerCmd *wc,
							   const RlockReply *reply);

/* sync.c: acquisitions that replicas must confirm (WAIT) */
extern void worker_sync_init(int nholds);
extern RlockConn *worker_hold_sync_conn(int index);
extern bool worker_sync_conn_missing(RlockConn *sync);
extern bool worker_sync_blocked(RlockConn *sync);
extern void worker_sync_join(RlockConn *sync, int need, int ask,
							 WorkerCmd *wc);
extern void worker_sync_granted(RlockConn *conn, WorkerCmd *wc, int64 value);
extern void worker_sync_lost_on(int index, RlockConn *conn);
extern void worker_sync_failure(int index, int need, int64 acks,
								char *detail);
extern void worker_sync_reply(RlockConn *conn, WorkerCmd *wc,
							  const RlockReply *reply);
extern bool worker_sync_may_resync(int index);
extern void worker_sync_flush(void);
extern void worker_sync_conn_ready(RlockConn *sync);

/* releases.c: releases, and bringing Redis back to the counts */
extern void worker_releases_init(int nholds);
extern void worker_sync_hold(int index);
extern void worker_requeue_hold(int index);
extern void worker_requeue_all_holds(void);
extern void worker_release_reply(RlockConn *conn, WorkerCmd *wc,
								 const RlockReply *reply);
extern RlockStatus worker_release_status(int index);
extern bool worker_release_refused(int index, const char **error);
extern void worker_releases_tick(TimestampTz now);
extern TimestampTz worker_releases_next(void);
extern void worker_recover_holds(void);
extern uint64 worker_releases_sent(void);
extern uint64 worker_release_mark(const char *key, int keylen);
extern void worker_note_release(const char *key, int keylen);
extern bool worker_release_inflight(const char *key, int keylen);
extern void worker_publish_unlock(RlockConn *conn, RlockKind kind,
								  const char *key, int keylen);
extern void worker_release_handing(const char *key, int keylen, int delta);
extern void worker_release_answered(RlockConn *conn, RlockCmd *cmd,
									int index, const RlockReply *reply,
									bool not_held, int32 target,
									TimestampTz expires);

/* transfer.c: a freed lock handed to a local waiter in one command */
extern bool worker_send_transfer(int index);
extern void worker_transfer_reply(RlockConn *conn, WorkerCmd *wc,
								  const RlockReply *reply);

/* owners.c: entries by owner */
extern void rlock_owners_init(void);
extern void rlock_owners_note(int index);
extern int	rlock_owners_holds(uint64 owner_id, const int **holds);
extern void rlock_owners_sweep(void);
extern bool rlock_owners_changed(void);
extern void rlock_owners_each(void (*fn) (uint64 owner_id, int pid, void *arg),
							  void *arg);

/* registry.c: this instance's name and sessions, in Redis */
extern void rlock_wfg_init(void);
extern void rlock_wfg_tick(TimestampTz now);
extern TimestampTz rlock_wfg_next(void);
extern void rlock_wfg_reply(RlockConn *conn, WorkerCmd *wc,
							const RlockReply *reply);
extern void rlock_registry_init(void);
extern void rlock_registry_touch(void);
extern void rlock_registry_tick(TimestampTz now);
extern TimestampTz rlock_registry_next(void);
extern void rlock_registry_reply(RlockConn *conn, WorkerCmd *wc,
								 const RlockReply *reply);

/* waiters.c: local waiters and the subscriptions they share */
extern void rlock_waiters_init(int nslots);
extern void rlock_waiters_join(int slot, RlockKind kind, const char *key,
							   int keylen);
extern void rlock_waiters_blocked(int slot, RlockKind kind, const char *key,
								  int keylen, int blocker);
extern void rlock_waiters_leave(int slot);
extern void rlock_waiters_shared(RlockKind kind, const char *key, int keylen,
								 int mode);
extern void rlock_waiters_pass_on(RlockKind kind, const char *key,
								  int keylen, bool handed);
extern void rlock_waiters_drain(void);
extern uint64 rlock_waiters_wakes(int slot);
extern TimestampTz rlock_waiters_line(RlockKind kind, const char *key,
									  int keylen, int *blocker);
extern void rlock_waiters_busy_until(int slot, const char *key, int keylen,
									 TimestampTz until, int blocker);
#define RLOCK_HANDED_OFF		1
#define RLOCK_HANDED_OFF_ECHO	2
/* how long a line of local waiters holds back for other clients */
#define RLOCK_HOLD_BACK_MS		2
/* ... and how long the lock it freed is left to clients other than rlock */
#define RLOCK_YIELD_MS			1
extern int	rlock_waiters_hand_off(RlockKind kind, const char *key,
								   int keylen, int n);
extern void rlock_waiters_echo_cancel(RlockKind kind, const char *key,
									  int keylen);
extern int	rlock_waiters_next(RlockKind kind, const char *key, int keylen);
extern bool rlock_waiters_holding_back(RlockKind kind, const char *key,
									   int keylen);
extern void rlock_waiters_transferred(RlockKind kind, const char *key,
									  int keylen, int heard);
extern void rlock_waiters_heard(RlockKind kind, const char *key, int keylen,
								int heard);
extern void rlock_waiters_reply(RlockConn *conn, WorkerCmd *wc,
								const RlockReply *reply);
extern void rlock_waiters_message(const char *channel, int channellen,
								  const char *payload, int payloadlen);
extern void rlock_waiters_conn_ready(RlockConn *conn);
extern void rlock_waiters_conn_lost(RlockConn *conn);
extern void rlock_waiters_unsubscribed(RlockConn *conn, const char *channel,
									   int channellen);
extern int	rlock_waiters_channels(void);
extern bool rlock_waiters_on(RlockConn *conn);

/* entries.c: the worker's side of the hold entries, and their batches */
extern RlockConn *worker_hold_conn(int index);
extern bool worker_hold_acquiring(int index);
extern bool worker_hold_settled(int index);
extern bool worker_hold_owned(int index, uint64 owner_id, bool holding,
							  uint32 *generation);
extern void worker_holds_lose_key(RlockKind kind, const char *key,
								  int keylen);
#define RLOCK_BATCH		100
typedef struct WorkerBatcher
{
	WorkerCmdType type;
	int64		arg_ms;
	int			slot;
	uint64		seq;
	int32		tag;
	List	   *buckets;		/* by connection */
	int			sent;
	bool		failed;			/* a connection could not take a batch */
} WorkerBatcher;
extern bool worker_batch_send(RlockConn *conn, WorkerCmdType type,
							  int64 arg_ms, const int *pairs, int n,
							  int slot, uint64 seq, int32 tag);
extern void worker_batcher_init(WorkerBatcher *b, WorkerCmdType type,
								int64 arg_ms, int slot, uint64 seq,
								int32 tag);
extern void worker_batcher_add(WorkerBatcher *b, int index,
							   uint32 generation);
extern int	worker_batcher_finish(WorkerBatcher *b);
extern int	worker_batch_apply(RlockConn *conn, WorkerCmd *wc,
							   const RlockReply *reply, bool extend_only,
							   int *extended, int *elsewhere);

/* renew.c: the watchdog */
extern void rlock_renew_tick(TimestampTz now);
extern TimestampTz rlock_renew_next(void);
extern void rlock_renew_soon(void);
extern void rlock_renew_reply(RlockConn *conn, WorkerCmd *wc,
							  const RlockReply *reply);

/* track.c */
extern void rlock_track_tick(void);
extern void rlock_track_conn_ready(RlockConn *conn);
extern void rlock_track_conn_lost(RlockConn *conn);
extern void rlock_track_reply(RlockConn *conn, WorkerCmd *wc,
							  const RlockReply *reply);
extern void rlock_track_invalidated(RlockConn *conn, const RlockReply *keys);
extern void rlock_track_sending(WorkerCmd *wc);
extern void rlock_track_mark_acquire(RlockConn *conn, WorkerCmd *wc,
									 RlockArgs *args, bool synced);
extern void rlock_track_answered(RlockConn *conn, WorkerCmd *wc,
								 bool granted);
extern bool rlock_track_message(RlockConn *conn, const char *channel,
								int channellen, const char *payload,
								int payloadlen);

#endif							/* RLOCK_WORKER_INT_H */
