/*-------------------------------------------------------------------------
 *
 * track.c
 *		Redis's client-side tracking, used for the check before commit:
 *		the command connection's reads of a held key are tracked, and any
 *		later change of the key by anyone else (a DEL, a forced unlock, an
 *		expiry, an eviction) is announced on the subscriber connection, so
 *		a commit can trust a hold nobody changed without asking Redis.
 *
 * The subscriber learns its CLIENT ID in its handshake and subscribes to
 * RLOCK_INVALIDATE_CHANNEL; then the command connection sends CLIENT
 * TRACKING ON REDIRECT <that id> NOLOOP (our own writes announce
 * nothing).  Tracking is armed from its OK until either connection is
 * lost, rlock.client_tracking is turned off, or Redis says "every key"
 * (FLUSHALL); each arming is a new epoch (never 0), published in shared
 * memory with 0 for "not armed".
 *
 * A hold is tracked under an epoch when an acquire of it that was sent
 * under that epoch, with no invalidation arriving between its sending and
 * its reply, granted it: the acquire script ends with a read of the key,
 * which tracks it (a key we write is untracked on the server, so every
 * other command the worker sends on a hold untracks the hold here).  An
 * invalidation of the key untracks the holds on it.  Any invalidation,
 * of any key, while an acquire is on the wire leaves that acquire's hold
 * untracked: the message may be for a change made after the script ran.
 * So does any other command that writes the hold's key sent after the
 * acquire (a renewal of the watchdog): Redis runs it after the script,
 * and its write makes Redis forget the key again, announcing nothing.
 *
 * Every pass of the loop, the Redis layer says which command's reply it
 * has read with the subscriber drained behind it
 * (rlock_redis_tracking_proof): every invalidation of a change Redis made
 * before running that command has been handled.  Its sending time goes
 * to shared memory (track_fresh_at), after the holds' changes; a backend
 * reads it first, then the holds.
 *
 * Only for a standalone server or one behind Sentinels; in a Redis
 * Cluster commits keep asking.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/track.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "worker/worker_int.h"

/* seq of a WORKER_CMD_TRACK: what it was */
#define TRACK_SUBSCRIBE		1
#define TRACK_ON			2
#define TRACK_OFF			3

/* A key with tracked holds, and those holds (index, generation pairs) */
typedef struct TrackedKey
{
	RlockKeyRef key;			/* hash key; data allocated with the entry */
	int			n;
	int			size;
	int		   *pairs;
} TrackedKey;

static HTAB *tracked = NULL;
static uint32 epoch = 0;		/* the current arming; 0: not armed */
static uint32 last_epoch = 0;
static RlockConn *armed_on = NULL;	/* the command connection armed */
static RlockConn *subscribed_on = NULL; /* the subscriber on the channel */
static RlockConn *subscribe_refused = NULL; /* refused the channel: not
											 * asked again until made again */
static bool subscribing = false;
static bool arming = false;
static bool was_on = false;		/* the command connection had tracking on */
static uint64 inval_seq = 1;	/* invalidation messages so far, plus 1 */
static RlockConn *refused_on = NULL;	/* refused tracking: not asked again
										 * until it is made again */
static bool refusal_told = false;
static int64 arming_redirect = 0;	/* the subscriber CLIENT TRACKING ON
									 * on the wire names */

/*
 * Per hold entry: the commands sent so far that write its key (any
 * generation).  A grant counts as tracked only if none was sent after its
 * acquire: Redis runs them in order, and the last write leaves the key
 * untracked.
 */
static uint32 *hold_writes = NULL;

/*
 * Remove a key from the table, and what its entry points to.
 */
static void
track_remove_key(TrackedKey *t)
{
	char	   *data = (char *) t->key.data;
	int		   *pairs = t->pairs;

	hash_search(tracked, &t->key, HASH_REMOVE, NULL);
	pfree(pairs);
	pfree(data);
}

/*
 * Forget every tracked hold: the keys stay untracked on this side until
 * acquires track them again.
 */
static void
track_forget_all(void)
{
	HASH_SEQ_STATUS seq;
	TrackedKey *t;

	/* a table that once was large is slow to walk even when empty */
	if (tracked == NULL || hash_get_num_entries(tracked) == 0)
		return;
	hash_seq_init(&seq, tracked);
	while ((t = (TrackedKey *) hash_seq_search(&seq)) != NULL)
	{
		int			i;

		for (i = 0; i < t->n; i++)
			rlock_hold_untrack(t->pairs[2 * i], t->pairs[2 * i + 1]);
		track_remove_key(t);
	}
}

/*
 * Drop the pair at "i" of a key's entry.
 */
static void
track_drop_pair(TrackedKey *t, int i)
{
	t->n--;
	t->pairs[2 * i] = t->pairs[2 * t->n];
	t->pairs[2 * i + 1] = t->pairs[2 * t->n + 1];
}

/*
 * Drop the pairs of entries since freed or reused from a key's entry;
 * true if none is left.
 */
static bool
track_prune_key(TrackedKey *t)
{
	int			i = 0;

	while (i < t->n)
	{
		RlockHold	copy;

		rlock_hold_read(t->pairs[2 * i], &copy);
		if (!rlock_hold_is_current(&copy, (uint32) t->pairs[2 * i + 1]))
			track_drop_pair(t, i);
		else
			i++;
	}
	return t->n == 0;
}

/*
 * The table holds no more keys than there are hold entries, give or take
 * a factor of two: a key leaves it when a command writes it or Redis
 * announces it, and a hold freed without either (lost, say) leaves a pair
 * behind, swept here once the table outgrows the hold table.
 */
static void
track_bound(void)
{
	HASH_SEQ_STATUS seq;
	TrackedKey *t;

	if (hash_get_num_entries(tracked) <= 2 * (long) rlock_shared->nholds)
		return;
	hash_seq_init(&seq, tracked);
	while ((t = (TrackedKey *) hash_seq_search(&seq)) != NULL)
	{
		if (track_prune_key(t))
			track_remove_key(t);
	}
}

/*
 * The entry "index" of "generation" is not tracked any more: out of its
 * key's entry (and the key out of the table with its last hold).
 */
static void
track_forget_hold(int index, uint32 generation)
{
	RlockHold  *h = rlock_hold(index);
	RlockKeyRef ref;
	TrackedKey *t;
	int			i;

	if (tracked == NULL)
		return;
	ref.data = h->key;
	ref.len = h->keylen;
	t = (TrackedKey *) hash_search(tracked, &ref, HASH_FIND, NULL);
	if (t == NULL)
		return;
	for (i = 0; i < t->n; i++)
	{
		if (t->pairs[2 * i] == index && t->pairs[2 * i + 1] == (int) generation)
		{
			track_drop_pair(t, i);
			break;
		}
	}
	if (t->n == 0)
		track_remove_key(t);
}

static void
track_publish_epoch(void)
{
	pg_atomic_write_u32(&rlock_shared->track_epoch, epoch);
	if (epoch == 0)
		pg_atomic_write_u64(&rlock_shared->track_fresh_at, 0);
}

/*
 * Tracking stops vouching: not armed any more, or (again) a new epoch
 * after Redis said every key changed.
 */
static void
track_disarm(void)
{
	epoch = 0;
	armed_on = NULL;
	track_publish_epoch();
	track_forget_all();
}

static bool
track_send(RlockConn *conn, int what)
{
	RlockArgs  *args = worker_args();
	WorkerCmd  *wc;

	if (what == TRACK_SUBSCRIBE)
	{
		rlock_args_cstr(args, "SUBSCRIBE");
		rlock_args_cstr(args, RLOCK_INVALIDATE_CHANNEL);
	}
	else
	{
		rlock_args_cstr(args, "CLIENT");
		rlock_args_cstr(args, "TRACKING");
		if (what == TRACK_OFF)
			rlock_args_cstr(args, "OFF");
		else
		{
			arming_redirect = rlock_redis_redirect_id(conn);
			rlock_args_cstr(args, "ON");
			rlock_args_cstr(args, "REDIRECT");
			rlock_args_int(args, arming_redirect);
			rlock_args_cstr(args, "NOLOOP");
		}
	}
	wc = worker_cmd_new(WORKER_CMD_TRACK);
	wc->seq = what;
	if (what == TRACK_SUBSCRIBE)
	{
		wc->cmd.shape = RLOCK_SHAPE_SUBSCRIBE;
		wc->cmd.channel = RLOCK_INVALIDATE_CHANNEL;
		wc->cmd.channellen = strlen(RLOCK_INVALIDATE_CHANNEL);
	}
	else
		wc->cmd.shape = RLOCK_SHAPE_OK;
	return worker_cmd_send(conn, wc, args);
}

/*
 * Arm tracking when everything is there for it: the setting, a
 * subscriber on the channel with its id, a ready command connection.
 */
void
rlock_track_tick(void)
{
	RlockConn  *cmd;

	if (!rlock_client_tracking)
	{
		if (epoch != 0)
		{
			if (rlock_conn_ready(armed_on))
				track_send(armed_on, TRACK_OFF);
			track_disarm();
			was_on = false;
		}
		return;
	}
	if (rlock_redis_cluster())
		return;
	/* a subscriber made while the setting was off follows the channel now */
	if (subscribed_on == NULL && !subscribing)
	{
		RlockConn  *sub = rlock_redis_subscriber_for("", 0);

		if (sub != NULL && sub != subscribe_refused)
			rlock_track_conn_ready(sub);
	}
	if (epoch != 0 || arming || subscribed_on == NULL)
		return;
	cmd = rlock_redis_command_conn();
	if (cmd == refused_on || !rlock_conn_ready(cmd) ||
		rlock_redis_redirect_id(cmd) <= 0)
		return;
	/* a redirection to a subscriber that is gone: start over */
	if (was_on && !track_send(cmd, TRACK_OFF))
		return;
	was_on = false;
	if (track_send(cmd, TRACK_ON))
		arming = true;
}

/*
 * A subscriber is ready: it follows the invalidations, if its handshake
 * learned its id.
 */
void
rlock_track_conn_ready(RlockConn *conn)
{
	if (!rlock_conn_is_subscriber(conn) || rlock_redis_cluster() ||
		!rlock_client_tracking || subscribing || subscribed_on != NULL ||
		conn != rlock_redis_subscriber_for("", 0) ||
		rlock_redis_redirect_id(rlock_redis_command_conn()) <= 0)
		return;
	if (track_send(conn, TRACK_SUBSCRIBE))
		subscribing = true;
}

/*
 * A connection is lost: tracking on it, or redirected to it, is over.
 */
void
rlock_track_conn_lost(RlockConn *conn)
{
	if (conn == subscribed_on)
	{
		subscribed_on = NULL;
		if (epoch != 0 || arming)
			was_on = true;		/* the redirection points at nobody */
		track_disarm();
	}
	else if (conn == armed_on)
	{
		was_on = false;			/* a new connection starts without it */
		track_disarm();
	}
	if (conn == refused_on)
		refused_on = NULL;
	if (conn == subscribe_refused)
		subscribe_refused = NULL;
}

void
rlock_track_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	bool		ok = reply != NULL && reply->type != RLOCK_REPLY_ERROR;

	if (wc->seq == TRACK_SUBSCRIBE)
	{
		subscribing = false;
		if (ok && rlock_conn_ready(conn))
			subscribed_on = conn;
		else if (reply != NULL && !ok)
			subscribe_refused = conn;
	}
	else if (wc->seq == TRACK_ON)
	{
		/*
		 * The subscriber it named may have been lost and replaced while
		 * it was on the wire: Redis would send the announcements to a
		 * client that is gone (accepted), or refuse to (Redis ran it after
		 * the loss).  Either way, ask again for the subscriber there is.
		 */
		bool		current = subscribed_on != NULL &&
			rlock_redis_redirect_id(conn) == arming_redirect;

		arming = false;
		if (ok && current && rlock_conn_ready(conn))
		{
			last_epoch = (last_epoch == PG_UINT32_MAX) ? 1 : last_epoch + 1;
			epoch = last_epoch;
			armed_on = conn;
			was_on = true;
			track_publish_epoch();
			return;
		}
		if (ok || (reply != NULL && !current))
		{
			was_on = true;		/* for a subscriber now gone */
			return;
		}
		if (reply != NULL)
			refused_on = conn;
	}
	if (reply != NULL && reply->type == RLOCK_REPLY_ERROR && !refusal_told)
	{
		refusal_told = true;
		ereport(LOG,
				(errmsg("rlock: Redis refused client-side tracking: %s",
						reply->str),
				 errdetail("Every check before commit asks Redis."),
				 errhint("Allow the rlock user CLIENT TRACKING and CLIENT ID and the channel \"%s\", or set rlock.client_tracking = off.",
						 RLOCK_INVALIDATE_CHANNEL)));
	}
}

/*
 * Keys changed (keys NULL: all of them): their holds are not vouched for
 * any more.
 */
void
rlock_track_invalidated(RlockConn *conn, const RlockReply *keys)
{
	int			i;

	inval_seq++;
	if (keys == NULL)
	{
		/* a FLUSHALL: every key; the server keeps tracking */
		uint32		was = epoch;

		track_disarm();
		if (was != 0 && conn == subscribed_on)
		{
			last_epoch = (last_epoch == PG_UINT32_MAX) ? 1 : last_epoch + 1;
			epoch = last_epoch;
			armed_on = rlock_redis_command_conn();
			track_publish_epoch();
		}
		return;
	}
	if (tracked == NULL)
		return;
	for (i = 0; i < keys->elements; i++)
	{
		const RlockReply *k = keys->element[i];
		RlockKeyRef ref = {k->str, k->len};
		TrackedKey *t;
		int			j;

		t = (TrackedKey *) hash_search(tracked, &ref, HASH_FIND, NULL);
		if (t == NULL)
			continue;
		for (j = 0; j < t->n; j++)
			rlock_hold_untrack(t->pairs[2 * j], t->pairs[2 * j + 1]);
		track_remove_key(t);
	}
}

/*
 * A command that writes the key of the hold entry "index" is going out.
 */
static void
track_note_write(int index, uint32 generation)
{
	if (hold_writes == NULL)
		hold_writes = MemoryContextAllocZero(rlock_worker_context,
											 sizeof(uint32) * rlock_shared->nholds);
	hold_writes[index]++;
	rlock_hold_untrack(index, generation);
	track_forget_hold(index, generation);
}

/*
 * A command about to go out: one that writes held keys untracks them on
 * the server (only an acquire's grant reads its key again after), so
 * their holds are untracked here; an acquire notes the epoch, the
 * invalidations so far and its hold's writes so far, which its reply
 * compares.
 */
void
rlock_track_sending(WorkerCmd *wc)
{
	int			i;

	wc->track_epoch = epoch;
	wc->track_seq = inval_seq;
	switch (wc->type)
	{
		case WORKER_CMD_ACQUIRE:
			track_note_write(wc->hold, rlock_hold(wc->hold)->generation);
			wc->track_writes = hold_writes[wc->hold];
			break;
		case WORKER_CMD_RELEASE:
			track_note_write(wc->hold, rlock_hold(wc->hold)->generation);
			break;
		case WORKER_CMD_RENEW:
		case WORKER_CMD_VERIFY:
			for (i = 0; i < wc->nholds; i++)
				track_note_write(wc->holds[2 * i], wc->holds[2 * i + 1]);
			break;
		default:
			break;
	}
}

/*
 * An acquire granted the hold on the connection it was sent on: tracked,
 * if nothing could have changed the key unseen since the script read it.
 */
void
rlock_track_granted(RlockConn *conn, WorkerCmd *wc)
{
	RlockHold  *h = rlock_hold(wc->hold);
	uint32		generation = h->generation;
	TrackedKey *t;
	RlockKeyRef ref;
	bool		found;
	MemoryContext old;
	int			i;

	if (epoch == 0 || wc->track_epoch != epoch || wc->track_seq != inval_seq ||
		conn != armed_on || wc->sent_on != armed_on ||
		hold_writes[wc->hold] != wc->track_writes ||
		!rlock_kinds[h->kind]->acquire_rereads)
		return;
	if (tracked == NULL)
		tracked = rlock_keyref_table("rlock tracked keys", sizeof(TrackedKey),
									 rlock_worker_context);
	ref.data = h->key;
	ref.len = h->keylen;
	t = (TrackedKey *) hash_search(tracked, &ref, HASH_ENTER, &found);
	old = MemoryContextSwitchTo(rlock_worker_context);
	if (!found)
	{
		char	   *data = palloc(h->keylen);

		memcpy(data, h->key, h->keylen);
		t->key.data = data;
		t->key.len = h->keylen;
		t->n = 0;
		t->size = 2;
		t->pairs = palloc(sizeof(int) * 2 * t->size);
	}
	MemoryContextSwitchTo(old);

	/* drop pairs of entries since freed or reused; skip a duplicate */
	(void) track_prune_key(t);
	for (i = 0; i < t->n; i++)
	{
		if (t->pairs[2 * i] == wc->hold && t->pairs[2 * i + 1] == (int) generation)
			break;
	}
	if (i == t->n)
	{
		if (t->n == t->size)
		{
			t->size *= 2;
			t->pairs = repalloc(t->pairs, sizeof(int) * 2 * t->size);
		}
		t->pairs[2 * t->n] = wc->hold;
		t->pairs[2 * t->n + 1] = (int) generation;
		t->n++;
	}
	rlock_hold_track(wc->hold, generation, epoch);
	track_bound();
}

/*
 * After a pass of the loop: publish what it proved (see the top).
 */
void
rlock_track_pass(void)
{
	TimestampTz sent_at;

	if (epoch == 0 || !rlock_redis_tracking_proof(&sent_at))
		return;
	pg_write_barrier();
	if ((uint64) sent_at > pg_atomic_read_u64(&rlock_shared->track_fresh_at))
		pg_atomic_write_u64(&rlock_shared->track_fresh_at, (uint64) sent_at);
}
