/*-------------------------------------------------------------------------
 *
 * replies.c
 *		What the answers to requests mean: a grant, a busy lock to wait
 *		for, a check's count of lost holds, a query's answer, an error.
 *
 * An answer stops the request's clock of unanswered commands
 * (requests.c); a lost one (NULL, its connection gone, or a reply the
 * worker does not accept) sends the request again, except for a forced
 * release, whose outcome the caller then learns is unknown.  A script
 * Redis no longer had is loaded again and the request retried, a bounded
 * number of times.  A grant for a request its backend gave up is handed
 * back at once.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/replies.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "worker/worker_int.h"

/* The longest a busy answer's lease is believed: one day */
#define RLOCK_MAX_TTL_MS		(INT64CONST(24) * 3600 * 1000)

/* Retry a request whose script Redis had lost at most this often */
#define RLOCK_NOSCRIPT_RETRIES	2

/*
 * Redis granted an acquire whose backend gave up on it: hand back all it
 * added, as many permits as it asked for, not one.
 */
static void
worker_hand_back(int hold)
{
	rlock_queue_release(hold, rlock_hold_added(hold), -1, false);
}

/*
 * The grant an acquisition waits for is settled: answer it, or hand back
 * what Redis granted if its backend gave up.
 */
void
worker_grant(WorkerCmd *wc, WorkerReq *req, int64 value)
{
	RlockHold  *h = rlock_hold(wc->hold);

	if (req == NULL)
	{
		worker_hand_back(wc->hold);
		return;
	}
	worker_note_answered(req);
	/* the line now waits for this grant's lease at most */
	rlock_waiters_busy_until(wc->slot, h->key, h->keylen,
							 TimestampTzPlusMilliseconds(wc->cmd.sent_at,
														 wc->lease_ms), 0);
	req->handed = false;		/* taken: its release will hand it on */
	req->granted = true;
	if (h->mode == RLOCK_MODE_SHARED)
		rlock_waiters_shared(h->kind, h->key, h->keylen, h->mode);
	if (!worker_answer(wc->slot, req->seq, RLOCK_STATUS_OK, value, NULL))
		worker_hand_back(wc->hold);
	worker_forget(req);
}

/*
 * The acquire failed because someone else holds the lock, "blocker" says
 * what kind of lock (RlockAcquired).  Wait for a wake-up, bounded by the
 * lock's TTL and the caller's deadline.  A lock
 * without expiry is looked at again every rlock.watchdog_timeout, so that
 * a missed message cannot make the wait endless.
 */
static void
worker_acquire_busy(WorkerReq *req, int64 pttl, int blocker)
{
	int			slot = worker_slot_of(req);
	RlockHold  *h = rlock_hold(req->args.hold);
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz retry_at;

	req->handed = false;		/* someone else has it: their release wakes */
	req->told_busy = true;

	/*
	 * Redis's number, whatever it is, must not overflow a timestamp: a
	 * lease longer than a day is looked at again after a day, and a
	 * negative one Redis never gives (-1: no expiry, -2: no key) counts as
	 * ending now, whose retries the quick-retry gap bounds.
	 */
	if (pttl > RLOCK_MAX_TTL_MS)
		pttl = RLOCK_MAX_TTL_MS;
	else if (pttl < -2)
		pttl = 0;

	if (req->args.wait_until != 0 && now >= req->args.wait_until)
	{
		worker_complete(req, RLOCK_STATUS_BUSY, 0, NULL);
		return;
	}

	rlock_waiters_join(slot, h->kind, h->key, h->keylen);
	rlock_waiters_blocked(slot, h->kind, h->key, h->keylen, blocker);
	rlock_waiters_busy_until(slot, h->key, h->keylen,
							 pttl > 0 ? TimestampTzPlusMilliseconds(now, pttl) :
							 pttl == -1 ?
							 TimestampTzPlusMilliseconds(now,
														 rlock_watchdog_timeout) :
							 now,	/* the lease is ending: no line */
							 blocker);
	if (rlock_waiters_wakes(slot) != req->wakes_seen ||
		worker_release_mark(h->key, h->keylen) > req->releases_seen ||
		pttl == 0 || pttl == -2)
	{
		/*
		 * Woken, or the lock freed here, while the try was on the wire; or
		 * the lease just ended: try again now.
		 */
		worker_retry_soon(req);
		return;
	}

	req->quick_retries = 0;
	worker_set_state(req, REQ_WAITING);
	worker_mark_busy(req);
	retry_at = TimestampTzPlusMilliseconds(now, pttl > 0 ? pttl :
										   rlock_watchdog_timeout);
	if (req->args.wait_until != 0)
		retry_at = Min(retry_at, req->args.wait_until);
	worker_timer_set(req, retry_at);
}

/*
 * A script Redis no longer had: load the scripts again and retry, a
 * bounded number of times.  False when the request should rather fail.
 */
static bool
worker_noscript_retry(RlockConn *conn, WorkerReq *req, WorkerCmd *wc)
{
	if (req->noscript++ >= RLOCK_NOSCRIPT_RETRIES ||
		!rlock_scripts_reload(conn, &wc->cmd))
		return false;
	worker_make_pending(req);
	return true;
}

/*
 * What an acquire's reply says, once checked: "reply" is NULL when it was
 * lost, or is as good as lost (a reply the kind does not know, a grant
 * with a fencing token nobody asked for: the connection fails).
 */
typedef struct AcquireAnswer
{
	const RlockReply *reply;
	RlockAcquired result;
	bool		bad_token;		/* granted with a token below 1: undone */
	int64		token;			/* that token */
} AcquireAnswer;

static void
worker_acquire_check(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply,
					 AcquireAnswer *a)
{
	RlockKind	kind = rlock_hold(wc->hold)->kind;

	memset(a, 0, sizeof(AcquireAnswer));
	a->reply = reply;
	if (reply != NULL && reply->type != RLOCK_REPLY_ERROR &&
		!rlock_kinds[kind]->acquire_result(reply, &a->result))
	{
		worker_unknown_status(conn, wc, kind);
		a->reply = NULL;
	}
	else if (a->result.granted && !wc->want_token && a->result.value != 0)
	{
		/* the script counts no token unless asked: Redis never says so */
		rlock_conn_fail(conn, "a grant with a fencing token nobody asked for");
		memset(&a->result, 0, sizeof(a->result));
		a->reply = NULL;
	}
	else if (a->result.granted && wc->want_token && a->result.value < 1)
	{
		/*
		 * INCR counts from 1: a token below that fences nothing.  Someone
		 * set the counter so (any client that may write it): the grant is
		 * undone, and the request fails with what the counter said.
		 */
		a->bad_token = true;
		a->token = a->result.value;
		memset(&a->result, 0, sizeof(a->result));
	}
}

/*
 * What an acquire's answer means for its request, still waiting for it.
 */
static void
worker_acquire_answered(RlockConn *conn, WorkerCmd *wc, WorkerReq *req,
						const AcquireAnswer *a)
{
	if (a->reply == NULL)
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);	/* after the resync, on a new connection */
		return;
	}
	worker_note_answered(req);
	if (a->bad_token)
	{
		char		detail[RLOCK_DETAIL_LEN];

		snprintf(detail, sizeof(detail),
				 "The fencing token counter of the lock gave " INT64_FORMAT ", and a token must be 1 or more (a client set the counter); the acquisition was undone.",
				 a->token);
		worker_complete(req, RLOCK_STATUS_REDIS_ERROR, 0, detail);
	}
	else if (a->result.granted)
		worker_grant(wc, req, a->result.value);
	else if (a->reply->type != RLOCK_REPLY_ERROR)
		worker_acquire_busy(req, a->result.value, a->result.blocker);
	else if (rlock_reply_classify(a->reply) != RLOCK_REPLY_NOSCRIPT ||
			 !worker_noscript_retry(conn, req, wc))
		worker_complete_error(req, a->reply);
}

/*
 * The reply of an acquire: granted (maybe although the owner's earlier
 * holds were gone), or busy with the lease left (maybe with the earlier
 * holds gone).  A lost reply leaves Redis in doubt: the entry's count is
 * sent again.  An error reply needs no such care: the script fails, if at
 * all, before its first write.  A grant that replicas must confirm waits
 * for its WAIT (sync.c).
 */
void
worker_acquire_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	AcquireAnswer a;
	WorkerReq  *req;
	bool		syncing;
	bool		newly_lost;

	worker_acquire_check(conn, wc, reply, &a);
	syncing = a.result.granted && wc->sync_tag != 0;
	if (a.result.granted)
		newly_lost = rlock_hold_grant(wc->hold, wc->target,
									  TimestampTzPlusMilliseconds(wc->cmd.sent_at,
																  wc->lease_ms),
									  syncing, a.result.lost);
	else
		newly_lost = rlock_hold_refuse(wc->hold,
									   a.reply == NULL || a.bad_token,
									   a.result.lost);
	if (newly_lost)
		rlock_count(RLOCK_STAT_LOST, 1);
	/* one that never ran (a cluster did not take it) needs no fence */
	if (a.reply == NULL && wc->sync_tag != 0 && !wc->cmd.unsent)
		worker_sync_lost_on(wc->hold, conn);
	rlock_track_answered(conn, wc, a.result.granted && !syncing);
	if (syncing)
	{
		worker_sync_granted(conn, wc, a.result.value);
		return;
	}
	worker_requeue_hold(wc->hold);

	req = worker_current(wc);
	if (req != NULL)
		worker_acquire_answered(conn, wc, req, &a);
	else if (a.result.granted)
	{
		/* its backend gave up: hand back what Redis granted */
		worker_hand_back(wc->hold);
	}
	else
		rlock_hold_try_free(wc->hold);
}

/*
 * An ACQUIRE_SET is settled with "status" (OK: every key granted, and
 * confirmed where replicas must; BUSY: key "busy" was; DECLINED: the
 * backend takes them one by one; NOT_SYNCED with "detail").  Answer it,
 * or, if its backend gave up, hand back every key Redis granted.
 */
static void
worker_set_settled(WorkerCmd *wc, RlockStatus status, int busy,
				   const char *detail)
{
	WorkerReq  *req = worker_current(wc);
	int			i;

	if (status == RLOCK_STATUS_OK &&
		(req == NULL ||
		 !worker_answer(wc->slot, req->seq, RLOCK_STATUS_OK, 0, NULL)))
	{
		for (i = 0; i < wc->nholds; i++)
			worker_hand_back(wc->holds[2 * i]);
	}
	else if (req == NULL)
	{
		for (i = 0; i < wc->nholds; i++)
			rlock_hold_try_free(wc->holds[2 * i]);
	}
	if (req == NULL)
		return;
	worker_note_answered(req);
	if (status == RLOCK_STATUS_OK)
	{
		req->granted = true;
		worker_forget(req);
	}
	else
		worker_complete(req, status, status == RLOCK_STATUS_BUSY ? busy : 0,
						detail);
}

/*
 * The reply of an ACQUIRE_SET: all granted, or none because one key was
 * busy (its index goes to the backend, which waits for that one).  An
 * error (the script fails before its first write, if at all), or no
 * answer: the backend takes the keys one by one (RLOCK_STATUS_DECLINED);
 * after no answer each entry's count is in doubt and restated, and the
 * keys taken one by one find whatever the command took their own.  A
 * grant that replicas must confirm waits for its WAIT (sync.c), which
 * settles it with worker_set_synced().
 */
void
worker_acquire_set_reply(RlockConn *conn, WorkerCmd *wc,
						 const RlockReply *reply)
{
	WorkerReq  *req = worker_current(wc);
	RlockKind	kind = rlock_hold(wc->holds[0])->kind;
	TimestampTz expires = TimestampTzPlusMilliseconds(wc->cmd.sent_at,
													  wc->lease_ms);
	bool		answered = (reply != NULL &&
							reply->type != RLOCK_REPLY_ERROR);
	bool		doubt = (reply == NULL);
	bool		granted;
	bool		syncing;
	int			busy = -1;
	int			i;

	if (answered &&
		!rlock_kinds[kind]->acquire_set_result(reply, wc->nholds, &busy))
	{
		worker_unknown_status(conn, wc, kind);
		answered = false;
		doubt = true;
	}
	granted = answered && busy < 0;
	syncing = granted && wc->sync_tag != 0;
	for (i = 0; i < wc->nholds; i++)
	{
		int			index = wc->holds[2 * i];

		if (granted)
			(void) rlock_hold_grant(index, 1, expires, syncing, false);
		else
			(void) rlock_hold_refuse(index, doubt, false);
		/* one that never ran (a cluster did not take it) needs no fence */
		if (reply == NULL && wc->sync_tag != 0 && !wc->cmd.unsent)
			worker_sync_lost_on(index, conn);
	}
	if (syncing)
	{
		worker_sync_granted(conn, wc, 0);
		return;
	}
	for (i = 0; i < wc->nholds; i++)
		worker_requeue_hold(wc->holds[2 * i]);

	if (req != NULL && reply != NULL && reply->type == RLOCK_REPLY_ERROR &&
		rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT)
	{
		worker_note_answered(req);
		if (worker_noscript_retry(conn, req, wc))
			return;
	}
	worker_set_settled(wc, granted ? RLOCK_STATUS_OK :
					   answered ? RLOCK_STATUS_BUSY : RLOCK_STATUS_DECLINED,
					   busy, NULL);
}

/*
 * The WAIT behind a granted ACQUIRE_SET answered with "acks" (-1: not at
 * all, or with an error): enough confirmations let the grant stand; too
 * few undo it, each key's count restated, and the request fails; no
 * answer undoes it too, and the backend takes the keys one by one.
 */
void
worker_set_synced(WorkerCmd *wc, int64 acks)
{
	bool		confirmed = acks >= wc->sync_need;
	char		detail[RLOCK_DETAIL_LEN];
	int			i;

	for (i = 0; i < wc->nholds; i++)
	{
		rlock_hold_settle(wc->holds[2 * i], 1, confirmed);
		worker_requeue_hold(wc->holds[2 * i]);
	}
	if (confirmed)
		worker_set_settled(wc, RLOCK_STATUS_OK, -1, NULL);
	else if (acks < 0)
		worker_set_settled(wc, RLOCK_STATUS_DECLINED, -1, NULL);
	else
	{
		worker_sync_failure(wc->holds[0], wc->sync_need, acks, detail);
		worker_set_settled(wc, RLOCK_STATUS_NOT_SYNCED, -1, detail);
	}
}

/*
 * The reply to one batch of a VERIFY request.  Lost entries are marked
 * whatever became of the request; the request is answered, with the number
 * of holds lost, when the last batch of its latest sending is in.
 */
void
worker_verify_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	int			elsewhere;
	int			lost = worker_batch_apply(conn, wc, reply, true, NULL,
										  &elsewhere);
	WorkerReq  *req = worker_current(wc);
	int			i;

	if (req == NULL || wc->target != req->attempt)
		return;
	/* entries whose slot moved: asked again one by one, keyed, so that
	 * Redis's redirection takes each where it went; those still the same */
	for (i = 0; i < elsewhere; i++)
	{
		RlockHold	h;

		rlock_hold_read(wc->holds[2 * i], &h);
		if (!rlock_hold_is_current(&h, (uint32) wc->holds[2 * i + 1]))
			continue;
		if (!worker_batch_send(worker_hold_conn(wc->holds[2 * i]),
							   WORKER_CMD_VERIFY, wc->lease_ms,
							   &wc->holds[2 * i], 1, wc->slot, wc->seq,
							   wc->target))
		{
			worker_note_unanswered(req, wc);
			worker_make_pending(req);
			return;
		}
		req->batches++;
	}
	if (reply == NULL || (lost < 0 && reply->type != RLOCK_REPLY_ERROR))
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);	/* send again on a new connection */
		return;
	}
	worker_note_answered(req);
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		if (rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT &&
			worker_noscript_retry(conn, req, wc))
			return;
		worker_complete_error(req, reply);
		return;
	}
	req->lost += lost;
	if (--req->batches == 0)
		worker_complete(req, RLOCK_STATUS_OK, req->lost, NULL);
}

void
worker_query_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	WorkerReq  *req = worker_current(wc);

	if (req == NULL)
		return;
	if (reply == NULL && req->args.op == RLOCK_OP_FORCE)
	{
		/*
		 * Redis may have removed the lock before the connection went.  Sent
		 * again, the removal could hit whoever took the lock since: the
		 * caller learns that the outcome is unknown instead.
		 */
		worker_complete(req, RLOCK_STATUS_CONNECTION, 0,
						"The connection to Redis was lost before it answered; the lock may or may not have been removed. rlock_holder() shows who holds it now.");
		return;
	}
	if (reply == NULL && req->args.op == RLOCK_OP_CALL)
	{
		/* a call that counts (down, up) must not count twice */
		worker_complete(req, RLOCK_STATUS_CONNECTION, 0,
						"The connection to Redis was lost before it answered; the call may or may not have taken effect.");
		return;
	}
	if (reply == NULL)
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);	/* harmless to ask again */
		return;
	}
	worker_note_answered(req);
	if (reply->type == RLOCK_REPLY_ERROR &&
		rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT &&
		req->args.op != RLOCK_OP_RELEASE && req->args.op != RLOCK_OP_BARRIER &&
		worker_noscript_retry(conn, req, wc))
		return;
	if (req->args.op == RLOCK_OP_HOLDER && reply->type != RLOCK_REPLY_ERROR)
	{
		char		text[RLOCK_DETAIL_LEN];
		int64		lease_ms;

		if (!rlock_kinds[req->args.kind]->holder_result(reply, text,
														sizeof(text),
														&lease_ms))
		{
			/* a lying server: drop the connection, fail the query now */
			worker_unknown_status(conn, wc, req->args.kind);
			worker_complete(req, RLOCK_STATUS_CONNECTION, 0,
							"Redis answered a holder query with a reply rlock does not accept.");
			return;
		}
		worker_complete(req, RLOCK_STATUS_OK, lease_ms, text);
		return;
	}
	if (reply->type == RLOCK_REPLY_ERROR)
		worker_complete_error(req, reply);
	else if (worker_release_refused_now(req))
		return;
	else if ((req->args.op == RLOCK_OP_RELEASE || req->args.op == RLOCK_OP_BARRIER) &&
			 worker_owner_busy(req, false))
		worker_set_state(req, REQ_WAITING);	/* a release goes out again */
	else if (req->args.op == RLOCK_OP_RELEASE)
		worker_complete(req, worker_release_status(req->args.hold), 0, NULL);
	else if (reply->type == RLOCK_REPLY_INTEGER)
	{
		if (req->args.op == RLOCK_OP_FORCE && reply->integer == 1)
			worker_holds_lose_key(req->args.kind, req->key,
								  req->args.keylen);
		worker_complete(req, RLOCK_STATUS_OK, reply->integer, NULL);
	}
	else
		worker_complete(req, RLOCK_STATUS_OK, 0, NULL);
}

