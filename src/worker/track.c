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
 * RLOCK_INVALIDATE_CHANNEL and to a channel of marks of its own, named
 * with random bytes; then the command connection sends CLIENT TRACKING ON
 * REDIRECT <that id>.  Not NOLOOP: NOLOOP also silences what Redis does
 * to a key while it runs one of our commands, an eviction under maxmemory
 * or a key dropped from its full tracking table, and our own writes are
 * accounted for below.  Tracking is armed from its OK until either
 * connection is lost, rlock.client_tracking is turned off, or Redis says
 * "every key" (FLUSHALL); each arming is a new epoch (never 0), published
 * in shared memory with 0 for "not armed".
 *
 * Which announcements came after a hold was read is told by marks.  An
 * acquire (or a transfer, for the hold it hands the lock to: transfer.c)
 * sent under tracking carries a number (its mark) and a random
 * tag, and its script, when it grants, reads the key last (tracked again
 * after its own write) and then publishes both on the marks channel.  The
 * channel's name is no secret (PUBSUB CHANNELS lists it) and anyone may
 * publish there; a mark counts only with the tag of an acquire on its way,
 * which nobody else knows before its script has published it.  Redis puts the mark
 * on the subscriber's stream where the script ran: an invalidation of the
 * key before it was for a change before the read, one after it for a
 * change after, with one exception.  The script read the key before it
 * wrote it, so its own write untracked the key, and Redis 7 holds that
 * invalidation back until the script is done: it comes right behind the
 * mark, before anything another command causes.  So a hold is tracked
 * once its grant has come, its mark has come, and right behind the mark
 * that invalidation of its key (invalidations of other keys the script
 * wrote, a fencing token's counter, may come first); anything else right
 * behind the mark, and the hold is never vouched for.  It stops being
 * tracked at the next invalidation of its key.  Any other command that
 * writes the hold's key (a renewal, a release) untracks it when it is
 * sent.  Servers that send a command's own invalidations as it writes
 * (before Redis 7.0) are not tracked at all.
 *
 * A mark also proves the subscriber's stream alive and read up to the
 * moment its acquire ran: every announcement of a change Redis made
 * before has been handled.  Its acquire's sending time goes to shared
 * memory (track_fresh_at), after the holds' changes; a backend reads it
 * first, then the holds, and asks Redis when it is older than
 * rlock.verify_window.  Without marks (a subscriber whose bytes are lost,
 * an idle worker, a user refused the marks channel) nothing is vouched.
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
#include "utils/timestamp.h"

#include "worker/worker_int.h"

/* seq of a WORKER_CMD_TRACK: what it was */
#define TRACK_SUBSCRIBE		1
#define TRACK_ON			2
#define TRACK_OFF			3
#define TRACK_SUBSCRIBE_MARKS 4

/* A hold whose acquire was sent under tracking */
typedef struct TrackedHold
{
	int			index;			/* the hold entry, and its generation */
	uint32		generation;
	uint64		mark;			/* its acquire's mark */
	bool		marked;			/* the mark came back */
	bool		granted;		/* the acquire granted it */
} TrackedHold;

/* A key with holds under tracking */
typedef struct TrackedKey
{
	RlockKeyRef key;			/* hash key; data allocated with the entry */
	int			n;
	int			size;
	TrackedHold *holds;
} TrackedKey;

/* A mark on its way, oldest first */
typedef struct PendingMark
{
	uint64		mark;
	uint64		tag;			/* random, published with the mark */
	int			index;
	uint32		generation;
	TimestampTz sent_at;
} PendingMark;

static HTAB *tracked = NULL;
static uint32 epoch = 0;		/* the current arming; 0: not armed */
static uint32 last_epoch = 0;
static RlockConn *armed_on = NULL;	/* the command connection armed */
static RlockConn *subscribed_on = NULL; /* the subscriber on both channels */
static RlockConn *subscribe_refused = NULL; /* refused a channel: not
											 * asked again until made again */
static int	subscribing = 0;	/* SUBSCRIBEs on the wire */
static int	subscribed = 0;		/* ... and confirmed */
static bool arming = false;
static bool was_on = false;		/* the command connection had tracking on */
static RlockConn *refused_on = NULL;	/* refused tracking: not asked again
										 * until it is made again */
static bool refusal_told = false;
static int64 arming_redirect = 0;	/* the subscriber CLIENT TRACKING ON
									 * on the wire names */

/* the marks channel, "rlock:track:" and 16 hex digits */
#define TRACK_MARKS_PREFIX	"rlock:track:"
static char marks_channel[sizeof(TRACK_MARKS_PREFIX) + 16];
static uint64 mark_sent = 0;	/* the latest mark sent */
static uint64 mark_seen = 0;	/* the latest mark come back */

/*
 * The hold whose mark came last, until the invalidation its own script
 * caused comes right behind it (see the top): 0 for mark when none.
 */
static uint64 expect_mark = 0;
static int	expect_index;
static uint32 expect_generation;

static void track_expectation(bool met);
static bool track_expected_in(const RlockReply *keys);

/* marks on their way: a ring, at most TRACK_MARKS_MAX */
#define TRACK_MARKS_MAX		8192
static PendingMark *pending = NULL;
static int	pending_size = 0;
static int	pending_head = 0;
static int	pending_n = 0;

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
	TrackedHold *holds = t->holds;

	hash_search(tracked, &t->key, HASH_REMOVE, NULL);
	pfree(holds);
	pfree(data);
}

/*
 * Untrack the hold at "i" of a key's entry, and drop it from the entry.
 */
static void
track_drop_hold(TrackedKey *t, int i)
{
	rlock_hold_untrack(t->holds[i].index, t->holds[i].generation);
	t->holds[i] = t->holds[--t->n];
}

/*
 * Drop the hold at "i" of a key's entry, and the key with its last hold.
 */
static void
track_give_up(TrackedKey *t, int i)
{
	track_drop_hold(t, i);
	if (t->n == 0)
		track_remove_key(t);
}

/*
 * Forget every hold under tracking, and every mark on its way: the keys
 * stay untracked on this side until acquires track them again.
 */
static void
track_forget_all(void)
{
	HASH_SEQ_STATUS seq;
	TrackedKey *t;

	pending_n = 0;
	pending_head = 0;
	expect_mark = 0;
	/* a table that once was large is slow to walk even when empty */
	if (tracked == NULL || hash_get_num_entries(tracked) == 0)
		return;
	hash_seq_init(&seq, tracked);
	while ((t = (TrackedKey *) hash_seq_search(&seq)) != NULL)
	{
		while (t->n > 0)
			track_drop_hold(t, 0);
		track_remove_key(t);
	}
}

/*
 * Drop the holds of entries since freed or reused from a key's entry;
 * true if none is left.
 */
static bool
track_prune_key(TrackedKey *t)
{
	int			i = 0;

	while (i < t->n)
	{
		RlockHold	copy;

		rlock_hold_read(t->holds[i].index, &copy);
		if (!rlock_hold_is_current(&copy, t->holds[i].generation))
			t->holds[i] = t->holds[--t->n];
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
 * The key's entry of the hold entry "index", or NULL.
 */
static TrackedKey *
track_key_of(int index, bool create)
{
	RlockHold  *h = rlock_hold(index);
	RlockKeyRef ref;
	TrackedKey *t;
	bool		found;

	if (tracked == NULL)
	{
		if (!create)
			return NULL;
		tracked = rlock_keyref_table("rlock tracked keys", sizeof(TrackedKey),
									 rlock_worker_context);
	}
	ref.data = h->key;
	ref.len = h->keylen;
	t = (TrackedKey *) hash_search(tracked, &ref,
								   create ? HASH_ENTER : HASH_FIND, &found);
	if (t != NULL && !found)
	{
		char	   *data = MemoryContextAlloc(rlock_worker_context, h->keylen);

		memcpy(data, h->key, h->keylen);
		t->key.data = data;
		t->key.len = h->keylen;
		t->n = 0;
		t->size = 2;
		t->holds = MemoryContextAlloc(rlock_worker_context,
									  sizeof(TrackedHold) * t->size);
	}
	return t;
}

/*
 * The position of the hold "index" of "generation" in its key's entry
 * (with its acquire's mark, if "mark" is not 0), or -1.
 */
static int
track_find_hold(TrackedKey *t, int index, uint32 generation, uint64 mark)
{
	int			i;

	for (i = 0; t != NULL && i < t->n; i++)
	{
		if (t->holds[i].index == index &&
			t->holds[i].generation == generation &&
			(mark == 0 || t->holds[i].mark == mark))
			return i;
	}
	return -1;
}

/*
 * The entry "index" of "generation" is not tracked any more: out of its
 * key's entry (and the key out of the table with its last hold).
 */
static void
track_forget_hold(int index, uint32 generation)
{
	TrackedKey *t = track_key_of(index, false);
	int			i = track_find_hold(t, index, generation, 0);

	if (i >= 0)
		track_give_up(t, i);
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
	const char *channel = NULL;

	if (what == TRACK_SUBSCRIBE || what == TRACK_SUBSCRIBE_MARKS)
	{
		channel = (what == TRACK_SUBSCRIBE) ?
			RLOCK_INVALIDATE_CHANNEL : marks_channel;
		rlock_args_cstr(args, "SUBSCRIBE");
		rlock_args_cstr(args, channel);
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
		}
	}
	wc = worker_cmd_new(WORKER_CMD_TRACK);
	wc->seq = what;
	if (channel != NULL)
	{
		wc->cmd.shape = RLOCK_SHAPE_SUBSCRIBE;
		wc->cmd.channel = channel;
		wc->cmd.channellen = strlen(channel);
	}
	else
		wc->cmd.shape = RLOCK_SHAPE_OK;
	return worker_cmd_send(conn, wc, args);
}

/*
 * Arm tracking when everything is there for it: the setting, a
 * subscriber on both channels with its id, a ready command connection.
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
	/* a subscriber made while the setting was off follows the channels now */
	if (subscribed_on == NULL && subscribing == 0)
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
 * A subscriber is ready: it follows the invalidations and a new channel
 * of marks, if its handshake learned its id.
 */
void
rlock_track_conn_ready(RlockConn *conn)
{
	uint8		nonce[8];
	int			i;

	if (!rlock_conn_is_subscriber(conn) || rlock_redis_cluster() ||
		!rlock_client_tracking || subscribing > 0 || subscribed_on != NULL ||
		conn != rlock_redis_subscriber_for("", 0) ||
		rlock_redis_redirect_id(rlock_redis_command_conn()) <= 0)
		return;
	/* a name nobody guesses: marks published by others would lie */
	if (!pg_strong_random(nonce, sizeof(nonce)))
		return;
	strcpy(marks_channel, TRACK_MARKS_PREFIX);
	for (i = 0; i < (int) sizeof(nonce); i++)
		snprintf(marks_channel + strlen(TRACK_MARKS_PREFIX) + 2 * i, 3,
				 "%02x", nonce[i]);
	subscribed = 0;
	if (track_send(conn, TRACK_SUBSCRIBE))
		subscribing++;
	if (subscribing == 1 && track_send(conn, TRACK_SUBSCRIBE_MARKS))
		subscribing++;
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

	if (wc->seq == TRACK_SUBSCRIBE || wc->seq == TRACK_SUBSCRIBE_MARKS)
	{
		if (subscribing > 0)
			subscribing--;
		if (ok)
			subscribed++;
		else if (reply != NULL)
			subscribe_refused = conn;
		if (subscribing == 0 && subscribed == 2 && rlock_conn_ready(conn) &&
			subscribe_refused != conn)
			subscribed_on = conn;
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
				 errhint("Allow the rlock user CLIENT TRACKING and CLIENT ID and the channels \"%s\" and \"%s*\", or set rlock.client_tracking = off.",
						 RLOCK_INVALIDATE_CHANNEL, TRACK_MARKS_PREFIX)));
	}
}

/*
 * Keys changed (keys NULL: all of them): holds on them whose marks came
 * before are not vouched for any more.  Holds whose marks are still to
 * come stay: the change came before their scripts read the keys.
 */
void
rlock_track_invalidated(RlockConn *conn, const RlockReply *keys)
{
	int			i;
	bool		met;

	if (keys == NULL)
	{
		/* a FLUSHALL: every key; the server keeps tracking */
		uint32		was = epoch;

		if (conn == subscribed_on)
			track_expectation(false);

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
	if (tracked == NULL || conn != subscribed_on)
		return;
	met = track_expected_in(keys);
	for (i = 0; i < keys->elements; i++)
	{
		const RlockReply *k = keys->element[i];
		RlockKeyRef ref = {k->str, k->len};
		TrackedKey *t;
		int			j = 0;

		t = (TrackedKey *) hash_search(tracked, &ref, HASH_FIND, NULL);
		if (t == NULL)
			continue;
		while (j < t->n)
		{
			if (t->holds[j].marked)
				track_drop_hold(t, j);
			else
				j++;
		}
		if (t->n == 0)
			track_remove_key(t);
	}
	/* the script's own invalidation: its hold is read from here on */
	if (met)
		track_expectation(true);
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
	track_forget_hold(index, generation);
}

/*
 * A random tag for a mark, from a pool filled a few dozen at a time; false
 * if the system has no randomness to give.
 */
static bool
track_new_tag(uint64 *tag)
{
	static uint64 pool[64];
	static int	left = 0;

	if (left == 0)
	{
		if (!pg_strong_random(pool, sizeof(pool)))
			return false;
		left = lengthof(pool);
	}
	*tag = pool[--left];
	return true;
}

/*
 * An acquire of the hold "index" is being built for "conn": give it a
 * mark, if tracking can vouch for what it grants (the kind's script reads
 * its key last and publishes the mark, see kinds.h), in two more
 * arguments: the marks channel and the mark with its tag ("<mark>:<tag in
 * 16 hex digits>").  Not for an acquisition that replicas must confirm:
 * its grant is not the hold's until they have.
 */
void
rlock_track_mark_acquire(RlockConn *conn, WorkerCmd *wc, RlockArgs *args,
						 bool synced)
{
	RlockHold  *h = rlock_hold(wc->hold);
	char		payload[48];

	wc->track_mark = 0;
	if (epoch == 0 || conn != armed_on || synced ||
		!rlock_kinds[h->kind]->acquire_rereads ||
		h->mode != RLOCK_MODE_EXCLUSIVE ||
		!track_new_tag(&wc->track_tag))
		return;
	wc->track_mark = ++mark_sent;
	snprintf(payload, sizeof(payload), UINT64_FORMAT ":%016llx",
			 wc->track_mark, (unsigned long long) wc->track_tag);
	rlock_args_cstr(args, marks_channel);
	rlock_args_cstr(args, payload);
}

/*
 * Put a mark on its way, dropping the oldest when too many are (their
 * scripts did not publish them: no grant, or a user refused the channel).
 */
static void
track_pending_push(WorkerCmd *wc)
{
	PendingMark *p;

	if (pending_n == pending_size)
	{
		int			size = pending_size == 0 ? 64 :
			Min(pending_size * 2, TRACK_MARKS_MAX);

		if (size == pending_size)
		{
			pending_head = (pending_head + 1) % pending_size;
			pending_n--;
		}
		else
		{
			PendingMark *grown = MemoryContextAlloc(rlock_worker_context,
													sizeof(PendingMark) * size);
			int			i;

			for (i = 0; i < pending_n; i++)
				grown[i] = pending[(pending_head + i) % pending_size];
			if (pending != NULL)
				pfree(pending);
			pending = grown;
			pending_size = size;
			pending_head = 0;
		}
	}
	p = &pending[(pending_head + pending_n) % pending_size];
	p->mark = wc->track_mark;
	p->tag = wc->track_tag;
	p->index = wc->hold;
	p->generation = rlock_hold(wc->hold)->generation;
	p->sent_at = GetCurrentTimestamp();
	pending_n++;
}

/*
 * A command about to go out: one that writes held keys untracks them on
 * the server (only an acquire's grant reads its key again after), so
 * their holds are untracked here; an acquire with a mark puts its hold
 * under tracking, waiting for its grant and its mark.
 */
void
rlock_track_sending(WorkerCmd *wc)
{
	int			i;
	TrackedKey *t;
	TrackedHold *th;

	wc->track_epoch = epoch;
	switch (wc->type)
	{
		case WORKER_CMD_TRANSFER:
			/* the giver's release, and the taker's acquire */
			track_note_write(wc->from_hold,
							 rlock_hold(wc->from_hold)->generation);
			/* FALLTHROUGH */
		case WORKER_CMD_ACQUIRE:
			track_note_write(wc->hold, rlock_hold(wc->hold)->generation);
			wc->track_writes = hold_writes[wc->hold];
			if (wc->track_mark == 0)
				break;
			t = track_key_of(wc->hold, true);
			(void) track_prune_key(t);
			if (t->n == t->size)
			{
				t->size *= 2;
				t->holds = repalloc(t->holds, sizeof(TrackedHold) * t->size);
			}
			th = &t->holds[t->n++];
			th->index = wc->hold;
			th->generation = rlock_hold(wc->hold)->generation;
			th->mark = wc->track_mark;
			th->marked = false;
			th->granted = false;
			track_pending_push(wc);
			track_bound();
			break;
		case WORKER_CMD_RELEASE:
			track_note_write(wc->hold, rlock_hold(wc->hold)->generation);
			break;
		case WORKER_CMD_RENEW:
		case WORKER_CMD_VERIFY:
		case WORKER_CMD_ACQUIRE_SET:
			for (i = 0; i < wc->nholds; i++)
				track_note_write(wc->holds[2 * i], wc->holds[2 * i + 1]);
			break;
		default:
			break;
	}
}

/*
 * A hold has both its grant and its mark: tracked.
 */
static void
track_arm_hold(TrackedHold *th)
{
	rlock_hold_track(th->index, th->generation, epoch);
}

/*
 * An acquire sent with a mark was answered ("granted" or not, or lost):
 * a grant on the connection armed, with nothing written to the key since,
 * waits for its mark or, come already, makes the hold tracked.
 */
void
rlock_track_answered(RlockConn *conn, WorkerCmd *wc, bool granted)
{
	TrackedKey *t;
	int			i;

	if (wc->track_mark == 0)
		return;
	t = track_key_of(wc->hold, false);
	i = track_find_hold(t, wc->hold, rlock_hold(wc->hold)->generation,
						wc->track_mark);
	if (i < 0)
		return;
	if (!granted || epoch == 0 || wc->track_epoch != epoch ||
		conn != armed_on || wc->sent_on != armed_on ||
		hold_writes[wc->hold] != wc->track_writes)
	{
		track_give_up(t, i);
		return;
	}
	t->holds[i].granted = true;
	if (t->holds[i].marked)
		track_arm_hold(&t->holds[i]);
	else
		rlock_redis_want_subscribers();
}

/*
 * The hold of the latest mark: met (true) when the invalidation its
 * script caused came right behind the mark, failed (false) when
 * something else came first.  Met, it is marked, and tracked if granted;
 * failed, it is never vouched for.
 */
static void
track_expectation(bool met)
{
	TrackedKey *t;
	int			i;

	if (expect_mark == 0)
		return;
	t = track_key_of(expect_index, false);
	i = track_find_hold(t, expect_index, expect_generation, expect_mark);
	expect_mark = 0;
	if (i < 0)
		return;
	if (!met)
	{
		track_give_up(t, i);
		return;
	}
	t->holds[i].marked = true;
	if (t->holds[i].granted)
		track_arm_hold(&t->holds[i]);
}

/*
 * Does an invalidation name the key of the hold of the latest mark?
 */
static bool
track_expected_in(const RlockReply *keys)
{
	RlockHold  *h;
	int			i;

	if (expect_mark == 0)
		return false;
	h = rlock_hold(expect_index);
	for (i = 0; i < keys->elements; i++)
	{
		const RlockReply *k = keys->element[i];

		if (k->len == h->keylen && memcmp(k->str, h->key, k->len) == 0)
			return true;
	}
	return false;
}

/*
 * Read a mark's payload: its number (digits, no more than a uint64 holds),
 * a colon and its tag in 16 hexadecimal digits.
 */
static bool
track_parse_mark(const char *payload, int len, uint64 *mark, uint64 *tag)
{
	uint64		v = 0;
	int			i = 0;
	int			digits;

	for (; i < len && payload[i] >= '0' && payload[i] <= '9'; i++)
	{
		if (v > (PG_UINT64_MAX - (payload[i] - '0')) / 10)
			return false;
		v = v * 10 + (payload[i] - '0');
	}
	digits = i;
	if (digits < 1 || digits > 20 || len != digits + 1 + 16 ||
		payload[digits] != ':')
		return false;
	*mark = v;
	v = 0;
	for (i = digits + 1; i < len; i++)
	{
		int			d;

		if (payload[i] >= '0' && payload[i] <= '9')
			d = payload[i] - '0';
		else if (payload[i] >= 'a' && payload[i] <= 'f')
			d = payload[i] - 'a' + 10;
		else
			return false;
		v = (v << 4) | d;
	}
	*tag = v;
	return true;
}

/*
 * Is "mark" on its way with "tag"?  The marks on their way rise from the
 * oldest: a binary search.
 */
static bool
track_pending_tagged(uint64 mark, uint64 tag)
{
	int			lo = 0;
	int			hi = pending_n - 1;

	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		PendingMark *p = &pending[(pending_head + mid) % pending_size];

		if (p->mark == mark)
			return p->tag == tag;
		if (p->mark < mark)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return false;
}

/*
 * Is this a message on our marks channel?  If so it is handled here: the
 * mark's hold may be tracked now, marks before it will not come (their
 * scripts did not grant), and the subscriber has read everything Redis
 * announced before the mark's acquire ran.
 */
bool
rlock_track_message(RlockConn *conn, const char *channel, int channellen,
					const char *payload, int payloadlen)
{
	uint64		mark;
	uint64		tag;
	TimestampTz fresh = 0;

	/* nothing but an invalidation comes right behind a mark */
	if (conn == subscribed_on)
		track_expectation(false);
	if (marks_channel[0] == '\0' || channellen != strlen(marks_channel) ||
		memcmp(channel, marks_channel, channellen) != 0)
		return false;

	/*
	 * Only marks of ours, in order, on the subscriber armed: with the tag
	 * of an acquire on its way.  Anyone may publish on the channel; a mark
	 * published before our acquire ran would claim announcements read that
	 * may still be on their way.
	 */
	if (conn != subscribed_on || epoch == 0 ||
		!track_parse_mark(payload, payloadlen, &mark, &tag) ||
		mark <= mark_seen || mark > mark_sent ||
		!track_pending_tagged(mark, tag))
		return true;
	mark_seen = mark;
	while (pending_n > 0 && pending[pending_head].mark <= mark)
	{
		PendingMark *p = &pending[pending_head];

		TrackedKey *t = track_key_of(p->index, false);
		int			i = track_find_hold(t, p->index, p->generation, p->mark);

		pending_head = (pending_head + 1) % pending_size;
		pending_n--;
		if (i < 0)
			continue;
		if (p->mark < mark)
		{
			/* its script published nothing: never vouched for */
			track_give_up(t, i);
			continue;
		}
		fresh = p->sent_at;
		expect_mark = mark;
		expect_index = p->index;
		expect_generation = p->generation;
	}
	if (fresh != 0)
	{
		/* the holds' changes before the time that vouches for them */
		pg_write_barrier();
		if ((uint64) fresh > pg_atomic_read_u64(&rlock_shared->track_fresh_at))
			pg_atomic_write_u64(&rlock_shared->track_fresh_at, (uint64) fresh);
	}
	return true;
}
