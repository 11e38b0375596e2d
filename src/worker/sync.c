/*-------------------------------------------------------------------------
 *
 * sync.c
 *		Acquisitions that replicas must confirm (rlock.sync_replicas): the
 *		WAIT that follows them on the sync connection, and what its answer
 *		does to their grants.
 *
 * Synced acquisitions go out in batches: every acquisition sent in one
 * pass of the worker, then one WAIT for them all (WAIT covers every write
 * sent before it on the connection).  While a WAIT is on the wire no
 * acquisition is sent: each WAIT may block the connection for
 * rlock.sync_timeout, and WAITs queued behind one another would add up.
 * Granted acquisitions wait for their batch's WAIT in sync_granted (copies
 * of their commands); the entry stays "acquiring" meanwhile.  Enough
 * confirmations let the grant stand; too few, or no answer, undo it (the
 * entry's previous count is restated, as after any unconfirmed grant).  In
 * a Redis Cluster each primary has its sync connection, and each
 * connection its batches (SyncConn); a grant redirected to another primary
 * (MOVED, ASK) joins a batch there.
 *
 * sync_lost_on: per hold entry, the sync connection on which an
 * acquisition went unanswered, or NULL.  The entry is restated only once
 * that connection was made again, and so the old one closed on the server
 * (see handshake_fence), or, in a Redis Cluster, once that node is no
 * primary any more.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/sync.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "worker/worker_int.h"

/* The worker's state of one sync connection */
typedef struct SyncConn
{
	uint64		batch;			/* tag of the batch being sent, 0 if none */
	int			need;
	int			ask;
	uint64		unwaited;		/* a batch whose WAIT could not be sent */
	bool		wait_inflight;
	uint64		wait_seq;		/* the WAIT on the wire: its send_seq, */
	uint64		wait_tag;		/* its batch, */
	int			wait_need;		/* and what that batch needs */
} SyncConn;

static uint64 sync_next_tag = 0;
static List *sync_batched = NIL;	/* connections with a batch to end */
static List *sync_granted = NIL;
static RlockConn **sync_lost_on;

static void worker_sync_settle_tag(uint64 tag, int64 acks,
								   const RlockReply *reply);

void
worker_sync_init(int nholds)
{
	sync_lost_on = MemoryContextAllocZero(rlock_worker_context,
										  sizeof(RlockConn *) * nholds);
}

/*
 * The worker's state of a sync connection.
 */
static SyncConn *
worker_sync_state(RlockConn *sync)
{
	void	  **data = rlock_conn_worker_data(sync);

	if (*data == NULL)
		*data = MemoryContextAllocZero(rlock_worker_context, sizeof(SyncConn));
	return (SyncConn *) *data;
}

/*
 * The sync connection of an entry: its key's.
 */
RlockConn *
worker_hold_sync_conn(int index)
{
	RlockHold  *h = rlock_hold(index);

	return rlock_redis_sync_for(h->key, h->keylen);
}

/*
 * Must acquisitions on this sync connection be synced now, and is it
 * missing?
 */
bool
worker_sync_conn_missing(RlockConn *sync)
{
	int			ask;

	return rlock_redis_sync_need(sync, &ask) > 0 && !rlock_conn_ready(sync);
}

/*
 * May no synced acquisition go out on this connection now: is it down,
 * or a WAIT on the wire?
 */
bool
worker_sync_blocked(RlockConn *sync)
{
	return !rlock_conn_ready(sync) || worker_sync_state(sync)->wait_inflight;
}

/*
 * May an entry be restated on the command connection now?  Not while an
 * acquisition sent for it on a lost sync connection may still run on the
 * server: only once the sync connection is made again (its handshake
 * closed the old one there), or is no longer used.
 */
bool
worker_sync_may_resync(int index)
{
	RlockConn  *sync = sync_lost_on[index];

	if (sync == NULL)
		return true;
	if (rlock_redis_cluster())
	{
		/*
		 * Made again (for the fence, even when unused), or not to be made
		 * again: a node that no longer serves slots runs no write of ours
		 * (dead, or a replica refusing it).
		 */
		if (!rlock_conn_ready(sync) && rlock_redis_conn_wanted(sync))
			return false;
	}
	/* a new sync connection is made for the fence even when unused */
	else if (!rlock_conn_ready(sync) &&
			 (rlock_sync_replicas != RLOCK_SYNC_OFF ||
			  rlock_redis_sync_fence_owed(sync)))
		return false;
	sync_lost_on[index] = NULL;
	return true;
}

/*
 * An acquisition for entry "index" went unanswered on sync connection
 * "conn": the entry waits for the fence before it is restated.
 */
void
worker_sync_lost_on(int index, RlockConn *conn)
{
	sync_lost_on[index] = conn;
}

/*
 * A sync connection is (back) up: entries held back for it may be
 * restated.
 */
void
worker_sync_conn_ready(RlockConn *sync)
{
	int			i;

	/* its handshake closed the lost one on the server: the fence is up */
	for (i = 0; i < rlock_shared->nholds; i++)
	{
		if (sync_lost_on[i] == sync)
			sync_lost_on[i] = NULL;
	}
	worker_requeue_all_holds();
}

/*
 * The batch being sent on a sync connection, begun if there is none:
 * acquisitions that need "need" confirmations, WAIT asking "ask".
 */
static uint64
worker_sync_batch(RlockConn *sync, SyncConn *sc, int need, int ask)
{
	if (sc->batch == 0)
	{
		MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);

		sc->batch = ++sync_next_tag;
		sc->need = need;
		sc->ask = ask;
		sync_batched = lappend(sync_batched, sync);
		MemoryContextSwitchTo(old);
	}
	return sc->batch;
}

/*
 * An acquire about to go out on a sync connection joins the batch of this
 * pass there.
 */
void
worker_sync_join(RlockConn *sync, int need, int ask, WorkerCmd *wc)
{
	SyncConn   *sc = worker_sync_state(sync);

	wc->sync_tag = worker_sync_batch(sync, sc, need, ask);
	wc->sync_need = sc->need;
	wc->cmd.writes_locks = true;	/* a lost one needs the fence */
}

/*
 * End each batch of synced acquisitions sent in this pass with WAIT on its
 * connection: it answers once "ask" replicas confirmed every write sent
 * before it on the connection, or rlock.sync_timeout passed.
 */
void
worker_sync_flush(void)
{
	ListCell   *lc;
	List	   *later = NIL;

	foreach(lc, sync_batched)
	{
		RlockConn  *sync = (RlockConn *) lfirst(lc);
		SyncConn   *sc = worker_sync_state(sync);
		WorkerCmd  *wc;
		RlockArgs  *args;

		if (sc->batch == 0)
			continue;
		if (sc->wait_inflight)
		{
			/* grants redirected here: one WAIT at a time on a connection */
			MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);

			later = lappend(later, sync);
			MemoryContextSwitchTo(old);
			continue;
		}
		wc = worker_cmd_new(WORKER_CMD_SYNC);
		args = worker_args();
		rlock_args_cstr(args, "WAIT");
		rlock_args_int(args, sc->ask);
		rlock_args_int(args, rlock_sync_timeout);
		wc->cmd.shape = RLOCK_SHAPE_INTEGER;
		wc->sync_tag = sc->batch;
		wc->sync_need = sc->need;
		if (worker_cmd_send(sync, wc, args))
		{
			sc->wait_inflight = true;
			sc->wait_seq = wc->cmd.send_seq;
			sc->wait_tag = sc->batch;
			sc->wait_need = sc->need;
		}
		else
		{
			/*
			 * Its grants count as unconfirmed: those still on the wire
			 * when they come, those answered already (redirected here)
			 * now.  The connection goes too: a later batch must not find
			 * these grants still on the wire.
			 */
			sc->unwaited = sc->batch;
			worker_sync_settle_tag(sc->batch, -1, NULL);
			rlock_conn_give_up(sync,
							   "the sync connection could not take a WAIT");
		}
		sc->batch = 0;
	}
	list_free(sync_batched);
	sync_batched = later;
}

/*
 * A granted acquisition's batch was answered by WAIT with "acks"
 * confirmations (-1: no answer, or an error "reply").  Enough: the grant
 * stands.  Too few, or no answer: the acquisition is undone (the entry's
 * previous count is restated, as after any unconfirmed grant) and the
 * request fails, or, when the answer was lost, tries again.
 */
/*
 * Too few of the "need" replicas confirmed an acquisition of entry
 * "index" ("acks" did): say so in rlock_status(), and in "detail" (room
 * for RLOCK_DETAIL_LEN) for the request's answer.
 */
void
worker_sync_failure(int index, int need, int64 acks, char *detail)
{
	snprintf(detail, RLOCK_DETAIL_LEN,
			 INT64_FORMAT " of the %d replicas needed confirmed it within rlock.sync_timeout (%d ms) at %s; the acquisition was undone.",
			 acks, need, rlock_sync_timeout,
			 rlock_conn_address(worker_hold_sync_conn(index)));
	rlock_redis_sync_failed(detail);
}

static void
worker_sync_settle(WorkerCmd *wc, int64 acks, const RlockReply *reply)
{
	WorkerReq  *req;
	bool		confirmed = acks >= wc->sync_need;

	if (wc->type == WORKER_CMD_ACQUIRE_SET)
	{
		worker_set_synced(wc, acks);
		return;
	}
	rlock_hold_settle(wc->hold, wc->target, confirmed);
	worker_requeue_hold(wc->hold);

	req = worker_current(wc);
	if (confirmed)
		worker_grant(wc, req, wc->sync_value);
	else if (req == NULL)
		rlock_hold_try_free(wc->hold);
	else if (acks < 0 && reply != NULL && reply->type == RLOCK_REPLY_ERROR)
		worker_complete_error(req, reply);
	else if (acks < 0)
	{
		worker_note_unanswered(req, wc);
		worker_make_pending(req);
	}
	else
	{
		char		detail[RLOCK_DETAIL_LEN];

		worker_sync_failure(wc->hold, wc->sync_need, acks, detail);
		worker_complete(req, RLOCK_STATUS_NOT_SYNCED, 0, detail);
	}
}

/*
 * Free a copy of a granted acquisition's command, with the entries it
 * names (an ACQUIRE_SET's, taken from the original: worker_sync_granted).
 */
static void
worker_sync_free(WorkerCmd *g)
{
	if (g->holds != NULL)
		pfree(g->holds);
	pfree(g);
}

/*
 * Settle "g" (a copy of a granted acquisition's command) now, and free it.
 */
static void
worker_sync_settle_now(WorkerCmd *g, int64 acks)
{
	worker_sync_settle(g, acks, NULL);
	worker_sync_free(g);
}

/*
 * Keep "g" until the WAIT of its batch (tag, need) answers.
 */
static void
worker_sync_keep(WorkerCmd *g, uint64 tag, int need)
{
	MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);

	g->sync_tag = tag;
	g->sync_need = need;
	sync_granted = lappend(sync_granted, g);
	MemoryContextSwitchTo(old);
}

/*
 * Redis granted an acquisition that replicas must confirm, answering on
 * "conn", with "value": it waits for its batch's WAIT.  Redirected (a
 * Redis Cluster's MOVED or ASK), it ran on another primary, which the
 * batch's WAIT does not ask: it joins a batch of that connection, with a
 * WAIT there.
 */
void
worker_sync_granted(RlockConn *conn, WorkerCmd *wc, int64 value)
{
	MemoryContext old = MemoryContextSwitchTo(rlock_worker_context);
	WorkerCmd  *g = palloc(sizeof(WorkerCmd));
	SyncConn   *sc;
	int			need;
	int			ask;

	*g = *wc;
	g->sync_value = value;
	wc->holds = NULL;			/* the copy's now */
	MemoryContextSwitchTo(old);

	if (conn == wc->sent_on)
	{
		/* no WAIT behind it (the connection took no more): unconfirmed */
		if (wc->sync_tag == worker_sync_state(conn)->unwaited)
			worker_sync_settle_now(g, -1);
		else
			worker_sync_keep(g, g->sync_tag, g->sync_need);
		return;
	}

	need = rlock_redis_sync_need(conn, &ask);
	sc = worker_sync_state(conn);
	if (need == 0)
	{
		/* no replica there to wait for, as for any grant there */
		g->sync_need = 0;
		worker_sync_settle_now(g, 0);
	}
	else if (!rlock_conn_is_sync(conn))
	{
		/* no WAIT on a command connection: undone, sent again */
		worker_sync_settle_now(g, -1);
	}
	else if (sc->wait_inflight && wc->cmd.send_seq < sc->wait_seq)
	{
		/* the WAIT on the wire there was sent after it: it counts */
		worker_sync_keep(g, sc->wait_tag, sc->wait_need);
	}
	else
		worker_sync_keep(g, worker_sync_batch(conn, sc, need, ask), sc->need);
}

/*
 * The answer to a batch's WAIT (NULL: lost with its connection): settle
 * every acquisition of the batch that Redis granted.
 */
void
worker_sync_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	int64		acks = -1;

	worker_sync_state(conn)->wait_inflight = false;
	if (reply != NULL && reply->type == RLOCK_REPLY_INTEGER)
	{
		/* a count below zero is no confirmation */
		acks = Max(reply->integer, 0);
		rlock_redis_sync_acks(conn, (int) Min(acks, INT_MAX));
	}
	worker_sync_settle_tag(wc->sync_tag, acks, reply);
}

/*
 * Settle every grant of the batch "tag" (acks: what its WAIT answered,
 * -1 for none).
 */
static void
worker_sync_settle_tag(uint64 tag, int64 acks, const RlockReply *reply)
{
	List	   *mine = NIL;
	ListCell   *lc;

	/* settling may send nothing, but take the batch out first */
	foreach(lc, sync_granted)
	{
		WorkerCmd  *g = (WorkerCmd *) lfirst(lc);

		if (g->sync_tag == tag)
		{
			mine = lappend(mine, g);
			sync_granted = foreach_delete_current(sync_granted, lc);
		}
	}
	foreach(lc, mine)
	{
		WorkerCmd  *g = (WorkerCmd *) lfirst(lc);

		worker_sync_settle(g, acks, reply);
		worker_sync_free(g);
	}
	list_free(mine);
}
