/*-------------------------------------------------------------------------
 *
 * plain.c
 *		The plain kind's commands and replies: Redisson's RLock.
 *
 * The data is Redisson's layout: a hash at the lock key with one field per
 * owner ("<uuid>:<n>") holding the hold count, and a PEXPIRE lease on the
 * key; plus "mode" = "write", which makes Redisson's read-write locks wait
 * for ours (acquire.lua).  A full release deletes the key and publishes
 * "0" on the lock's channel, which wakes Redisson waiters and ours alike,
 * and tells the waiters of Redisson's read-write and fair locks of the
 * name on their channels (publish.lua).  Ours wait for a Redisson
 * read-write lock too, listening on its channel (plain_blocker_channel).
 * The scripts are the .lua files of this folder, with the Lua that every
 * kind shares (the .lua files of kinds/); unlike Redisson's, they take
 * the hold count to leave rather than a step (see kinds/README.md).
 * Where the channel goes and how a batch is laid out is kinds.c's to say:
 * nothing here asks which topology Redis serves.
 *
 * Replies are checked for their shape by the connection (redis.h); here
 * only their values are, and a value no script of ours returns makes the
 * parse fail, which the worker treats as a protocol violation.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/plain/plain.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "kinds/kinds.h"
#include "kinds/plain/scripts.h"

static int	script_acquire;
static int	script_release;
static int	script_renew;
static int	script_verify;
static int	script_force;
static int	script_holder;
static int	script_probe;
static int	script_transfer;
static int	script_yield;
static int	script_acquire_shared;
static int	script_release_shared;
static int	script_acquire_set;

static void
plain_init(void)
{
	script_acquire = rlock_script_register("acquire", acquire_lua);
	script_release = rlock_script_register("release", release_lua);
	script_renew = rlock_script_register("renew", renew_lua);
	script_verify = rlock_script_register("verify", verify_lua);
	script_force = rlock_script_register("force", force_lua);
	script_holder = rlock_script_register("holder", holder_lua);
	script_probe = rlock_script_register("probe", probe_lua);
	script_transfer = rlock_script_register("transfer", transfer_lua);
	script_yield = rlock_script_register("yield", yield_lua);
	script_acquire_shared = rlock_script_register("acquire_shared",
												  acquire_shared_lua);
	script_release_shared = rlock_script_register("release_shared",
												  release_shared_lua);
	script_acquire_set = rlock_script_register("acquire_set",
											   acquire_set_lua);
}

/*
 * Add the fencing token counter of the key.
 */
static void
plain_add_token(RlockArgs *args, const RlockKindHold *hold)
{
	char	   *name = palloc(RLOCK_CHANNEL_MAXLEN(hold->keylen));

	rlock_args_add(args, name, rlock_token_name(name, hold->key, hold->keylen));
	pfree(name);
}

/*
 * The unlock channel of a key, Redisson's: redisson_lock__channel:{key}
 */
static int
plain_channel(char *buf, const char *key, int keylen)
{
	return rlock_channel_name(buf, key, keylen);
}

/*
 * The unlock channel of a key, palloc'd, and its length in *len.
 */
static char *
plain_channel_copy(const char *key, int keylen, int *len)
{
	char	   *channel = palloc(RLOCK_CHANNEL_MAXLEN(keylen));

	*len = plain_channel(channel, key, keylen);
	return channel;
}

/*
 * The only blocker plain_acquire_result knows: a Redisson read-write lock,
 * whose releases publish on redisson_rwlock:{key} ("0" when a read release
 * frees it, "1" when a write release does)
 */
#define PLAIN_BLOCKER_RWLOCK	1

static int
plain_blocker_channel(char *buf, const char *key, int keylen, int blocker)
{
	if (blocker != PLAIN_BLOCKER_RWLOCK)
		return 0;
	return rlock_derived_name(buf, RLOCK_RWLOCK_PREFIX, key, keylen);
}

/*
 * Redisson's messages: "0" (an unlock) wakes one waiter, "1" (a
 * read-write lock's unlock, which may free it for many readers) all of
 * them; any other wakes one, as Redisson's lock retries on any message.
 */
static int
plain_wake(const char *payload, int len)
{
	return (len == 1 && payload[0] == '1') ? RLOCK_WAKE_ALL : 1;
}

/*
 * An exclusive lock: a release that leaves nothing frees it for one.
 */
static int
plain_hand_off(RlockAmount left)
{
	return left == 0 ? 1 : 0;
}

/*
 * The yield mark of a key (palloc'd), and its length in *len.
 */
static char *
plain_yield_name(const char *key, int keylen, int *len)
{
	char	   *name = palloc(RLOCK_CHANNEL_MAXLEN(keylen));

	*len = rlock_yield_name(name, key, keylen);
	return name;
}

/*
 * EVALSHA acquire_shared 1 key lease reader-field target exclusive-field:
 * a shared hold may join the same session's exclusive one
 */
static void
plain_acquire_shared(RlockArgs *args, RlockCmd *cmd,
					 const RlockKindHold *hold, RlockAmount target,
					 int64 lease_ms)
{
	RlockKindHold exclusive = *hold;

	exclusive.mode = RLOCK_MODE_EXCLUSIVE;
	rlock_args_script(args, script_acquire_shared, 1);
	rlock_args_add(args, hold->key, hold->keylen);
	rlock_args_int(args, lease_ms);
	rlock_kind_owner(args, hold);
	rlock_args_int(args, target);
	rlock_kind_owner(args, &exclusive);
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 3;
}

/*
 * EVALSHA acquire 1|2 key [token-key] lease owner target yield-mark|''
 */
static void
plain_acquire(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			  RlockAmount target, int64 lease_ms, bool want_token)
{
	if (hold->mode == RLOCK_MODE_SHARED)
	{
		Assert(!want_token);
		plain_acquire_shared(args, cmd, hold, target, lease_ms);
		return;
	}
	rlock_args_script(args, script_acquire, want_token ? 2 : 1);
	rlock_args_add(args, hold->key, hold->keylen);
	if (want_token)
		plain_add_token(args, hold);
	rlock_args_int(args, lease_ms);
	rlock_kind_owner(args, hold);
	rlock_args_int(args, target);
	if (hold->waited)
	{
		int			len;
		char	   *name = plain_yield_name(hold->key, hold->keylen, &len);

		rlock_args_add(args, name, len);
		pfree(name);
	}
	else
		rlock_args_add(args, "", 0);
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 3;
}

/*
 * EVALSHA acquire_set n key... lease owner: the owner is the same for
 * every key of the set (one session, exclusive)
 */
static void
plain_acquire_set(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *holds,
				  int n, int64 lease_ms)
{
	int			i;

	Assert(n > 0);
	rlock_args_script(args, script_acquire_set, n);
	for (i = 0; i < n; i++)
	{
		Assert(holds[i].mode == RLOCK_MODE_EXCLUSIVE &&
			   holds[i].owner_id == holds[0].owner_id);
		rlock_args_add(args, holds[i].key, holds[i].keylen);
	}
	rlock_args_int(args, lease_ms);
	rlock_kind_owner(args, &holds[0]);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

/*
 * 0: all taken; i from 1: the ith is busy.  Anything else means nothing.
 */
static bool
plain_acquire_set_result(const RlockReply *reply, int n, int *busy)
{
	if (reply->integer < 0 || reply->integer > n)
		return false;
	*busy = (int) reply->integer - 1;
	return true;
}

/*
 * EVALSHA yield 0 yield-mark ms: the mark is no declared key (yield.lua)
 */
static void
plain_yield(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen,
			int ms)
{
	int			len;
	char	   *name = plain_yield_name(key, keylen, &len);

	rlock_args_script(args, script_yield, 0);
	rlock_args_add(args, name, len);
	rlock_args_int(args, ms);
	pfree(name);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

static bool
plain_acquire_result(const RlockReply *reply, RlockAcquired *result)
{
	int64		status = reply->element[0]->integer;
	int64		blocker = reply->element[2]->integer;

	result->value = reply->element[1]->integer;
	result->granted = (status == 1 || status == 2);
	result->lost = (status == 2 || status == 3);
	result->blocker = (int) blocker;
	return status >= 0 && status <= 3 &&
		(blocker == 0 || (blocker == PLAIN_BLOCKER_RWLOCK &&
						  !result->granted));
}

/*
 * EVALSHA release|release_shared 1|2 key [channel] owner target lease
 * publish..., the channel and the publish commands placed by kinds.c
 */
static void
plain_release(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			  RlockAmount target, int64 lease_ms)
{
	int			len;
	char	   *channel = plain_channel_copy(hold->key, hold->keylen, &len);

	rlock_kind_script(args, hold->mode == RLOCK_MODE_SHARED ?
					  script_release_shared : script_release, 1, 1);
	rlock_args_add(args, hold->key, hold->keylen);
	rlock_kind_channel(args, channel, len);
	rlock_kind_owner(args, hold);
	rlock_args_int(args, target);
	rlock_args_int(args, lease_ms);
	rlock_kind_publish(args, channel, len);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGER_OR_NIL;
}

/*
 * A release frees the lock for one other owner, or nothing.  Freed, it
 * says 1 plus the number of subscribers its unlock message reached.
 */
static RlockReleased
plain_release_result(const RlockReply *reply, RlockAmount *freed)
{
	*freed = 0;
	if (reply->type == RLOCK_REPLY_NIL)
		return RLOCK_RELEASED_NOT_HELD;
	if (reply->integer == 0)
		return RLOCK_RELEASED_KEPT;
	if (reply->integer >= 1)
	{
		*freed = 1;
		return RLOCK_RELEASED_FREED;
	}
	return RLOCK_RELEASED_INVALID;
}

static int
plain_release_heard(const RlockReply *reply)
{
	return (int) Min(reply->integer - 1, PG_INT32_MAX);
}

/*
 * EVALSHA transfer 2 key channel lease from-owner to-owner target: only
 * outside a Redis Cluster, where the channel may be declared as a key.
 */
static void
plain_transfer(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *from,
			   const RlockKindHold *to, RlockAmount target, int64 lease_ms)
{
	int			len;
	char	   *channel = plain_channel_copy(from->key, from->keylen, &len);

	rlock_args_script(args, script_transfer, 2);
	rlock_args_add(args, from->key, from->keylen);
	rlock_args_add(args, channel, len);
	rlock_args_int(args, lease_ms);
	rlock_kind_owner(args, from);
	rlock_kind_owner(args, to);
	rlock_args_int(args, target);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 2;
}

static bool
plain_transfer_result(const RlockReply *reply, bool *moved, int *heard)
{
	int64		status = reply->element[0]->integer;
	int64		listening = reply->element[1]->integer;

	*moved = (status == 1);
	*heard = (int) Min(Max(listening, -1), PG_INT32_MAX);
	return (status == 1 && listening >= -1) ||
		(status == 0 && listening == 0);
}

/*
 * The batches, in kinds.c's layout (batch.lua)
 */
static void
plain_batch(RlockArgs *args, RlockCmd *cmd, RlockBatchKind which, int64 ms,
			const RlockKindHold *holds, int n)
{
	rlock_kind_batch(args, cmd, which == RLOCK_BATCH_RENEW ? script_renew :
					 script_verify, ms, holds, n);
}

/*
 * EVALSHA probe 1 key
 */
static void
plain_probe(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	rlock_args_script(args, script_probe, 1);
	rlock_args_add(args, key, keylen);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

/*
 * EVALSHA force 1|2 key [channel] publish..., placed by kinds.c
 */
static void
plain_force(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	int			len;
	char	   *channel = plain_channel_copy(key, keylen, &len);

	rlock_kind_script(args, script_force, 1, 1);
	rlock_args_add(args, key, keylen);
	rlock_kind_channel(args, channel, len);
	rlock_kind_publish(args, channel, len);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

/*
 * EVALSHA holder 1 key
 */
static void
plain_holder(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	rlock_args_script(args, script_holder, 1);
	rlock_args_add(args, key, keylen);
	cmd->shape = RLOCK_SHAPE_ARRAY;
}

/*
 * Append a string from Redis to the holder's text: at most 120 bytes,
 * control characters (the line separator among them) shown as '?'.
 */
static void
plain_holder_field(StringInfo buf, const RlockReply *r)
{
	int			i;

	if (r->type == RLOCK_REPLY_STRING)
		for (i = 0; i < Min(r->len, 120); i++)
		{
			unsigned char c = (unsigned char) r->str[i];

			appendStringInfoChar(buf, (c < 0x20 || c == 0x7f) ? '?' : (char) c);
		}
	appendStringInfoChar(buf, '\n');
}

static bool
plain_holder_result(const RlockReply *reply, char *buf, int buflen,
					int64 *lease_ms)
{
	StringInfoData text;
	RlockReply **e = reply->element;
	int			i;

	if (reply->type != RLOCK_REPLY_ARRAY)
		return false;
	if (reply->elements == 0)
	{
		buf[0] = '\0';
		*lease_ms = -2;
		return true;
	}
	if (reply->elements != 6 ||
		e[0]->type != RLOCK_REPLY_STRING || e[1]->type != RLOCK_REPLY_STRING ||
		e[4]->type != RLOCK_REPLY_INTEGER || e[5]->type != RLOCK_REPLY_INTEGER)
		return false;
	for (i = 2; i <= 3; i++)
		if (e[i]->type != RLOCK_REPLY_STRING && e[i]->type != RLOCK_REPLY_NIL)
			return false;

	initStringInfo(&text);
	for (i = 0; i < 4; i++)
		plain_holder_field(&text, e[i]);
	appendStringInfo(&text, INT64_FORMAT, e[5]->integer);
	strlcpy(buf, text.data, buflen);
	pfree(text.data);
	*lease_ms = e[4]->integer;
	return true;
}

const RlockKindMethod rlock_kind_plain = {
	.init = plain_init,
	.step = 1,
	.acquire = plain_acquire,
	.acquire_result = plain_acquire_result,
	.acquire_set = plain_acquire_set,
	.acquire_set_result = plain_acquire_set_result,
	.release = plain_release,
	.release_result = plain_release_result,
	.batch = plain_batch,
	.batch_result = rlock_kind_batch_result,
	.probe = plain_probe,
	.force = plain_force,
	.holder = plain_holder,
	.holder_result = plain_holder_result,
	.channel = plain_channel,
	.blocker_channel = plain_blocker_channel,
	.wake = plain_wake,
	.hand_off = plain_hand_off,
	.free_message = "0",
	.release_heard = plain_release_heard,
	.yield = plain_yield,
	.acquire_rereads = true,
	.transfer = plain_transfer,
	.transfer_result = plain_transfer_result
};
