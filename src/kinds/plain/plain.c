/*-------------------------------------------------------------------------
 *
 * plain.c
 *		The plain kind's commands and replies: Redisson's RLock.
 *
 * The data is Redisson's layout: a hash at the lock key with one field per
 * owner ("<uuid>:<n>") holding the hold count, and a PEXPIRE lease on the
 * key; plus "mode" = "write", which makes Redisson's read-write locks wait
 * for ours (acquire.lua).  A full release deletes the key and publishes "0" on the lock's
 * channel, which wakes Redisson waiters and ours alike.  The scripts are
 * the .lua files of this folder; unlike Redisson's, they take the hold
 * count to leave rather than a step (see kinds/README.md).
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

#include "kinds/plain/plain.h"
#include "kinds/plain/scripts.h"

static int	script_acquire;
static int	script_release;
static int	script_renew;
static int	script_verify;
static int	script_force;
static int	script_holder;
static int	script_probe;

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
}

/*
 * Add a name derived from the key (its channel or token counter).
 */
static void
plain_add_derived(RlockArgs *args, const RlockKindHold *hold, bool channel)
{
	char	   *name = palloc(RLOCK_CHANNEL_MAXLEN(hold->keylen));
	int			len;

	len = channel ? rlock_channel_name(name, hold->key, hold->keylen) :
		rlock_token_name(name, hold->key, hold->keylen);
	rlock_args_add(args, name, len);
	pfree(name);
}

/*
 * The publish command for unlock messages, and in a Redis Cluster the
 * channel (in ARGV: a channel is no key) and a second command, when
 * messages go both ways.
 */
static void
plain_add_publish(RlockArgs *args, const RlockKindHold *hold)
{
	int			pubsub = rlock_redis_pubsub();

	rlock_args_cstr(args, (pubsub & RLOCK_PUBSUB_SHARDED) ?
					"SPUBLISH" : "PUBLISH");
	if (!rlock_redis_cluster())
		return;
	plain_add_derived(args, hold, true);
	if (pubsub == (RLOCK_PUBSUB_SHARDED | RLOCK_PUBSUB_CLASSIC))
		rlock_args_cstr(args, "PUBLISH");
}

static void
plain_add_owner(RlockArgs *args, uint64 owner_id)
{
	char		owner[RLOCK_OWNER_MAXLEN];

	rlock_args_add(args, owner, rlock_owner_name(owner, owner_id));
}

/*
 * EVALSHA acquire 1|2 key [token-key] lease owner target
 */
static void
plain_acquire(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			  int32 target, int64 lease_ms, bool want_token)
{
	rlock_args_script(args, script_acquire, want_token ? 2 : 1);
	rlock_args_add(args, hold->key, hold->keylen);
	if (want_token)
		plain_add_derived(args, hold, false);
	rlock_args_int(args, lease_ms);
	plain_add_owner(args, hold->owner_id);
	rlock_args_int(args, target);
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 2;
}

static bool
plain_acquire_result(const RlockReply *reply, RlockAcquired *result)
{
	int64		status = reply->element[0]->integer;

	result->value = reply->element[1]->integer;
	result->granted = (status == 1 || status == 2);
	result->lost = (status == 2 || status == 3);
	return status >= 0 && status <= 3;
}

/*
 * EVALSHA release 2 key channel owner target lease PUBLISH, or in a Redis
 * Cluster EVALSHA release 1 key owner target lease (S)PUBLISH channel
 * [PUBLISH]
 */
static void
plain_release(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			  int32 target, int64 lease_ms)
{
	bool		cluster = rlock_redis_cluster();

	rlock_args_script(args, script_release, cluster ? 1 : 2);
	rlock_args_add(args, hold->key, hold->keylen);
	if (!cluster)
		plain_add_derived(args, hold, true);
	plain_add_owner(args, hold->owner_id);
	rlock_args_int(args, target);
	rlock_args_int(args, lease_ms);
	plain_add_publish(args, hold);
	cmd->shape = RLOCK_SHAPE_INTEGER_OR_NIL;
}

static RlockReleased
plain_release_result(const RlockReply *reply)
{
	if (reply->type == RLOCK_REPLY_NIL)
		return RLOCK_RELEASED_NOT_HELD;
	if (reply->integer == 0)
		return RLOCK_RELEASED_KEPT;
	if (reply->integer == 1)
		return RLOCK_RELEASED_FREED;
	return RLOCK_RELEASED_INVALID;
}

/*
 * EVALSHA renew|verify n key... ms owner..., or in a Redis Cluster, where
 * the keys are of many slots, EVALSHA renew|verify 0 ms key owner ...
 * (the script answers 2 for a key the node does not serve)
 */
static void
plain_batch(RlockArgs *args, RlockCmd *cmd, RlockBatchKind which, int64 ms,
			const RlockKindHold *holds, int n)
{
	int			script = which == RLOCK_BATCH_RENEW ? script_renew :
		script_verify;
	int			i;

	/* one key is of one slot: declared, a redirection can follow it */
	if (rlock_redis_cluster() && n > 1)
	{
		rlock_args_script(args, script, 0);
		rlock_args_int(args, ms);
		for (i = 0; i < n; i++)
		{
			rlock_args_add(args, holds[i].key, holds[i].keylen);
			plain_add_owner(args, holds[i].owner_id);
		}
	}
	else
	{
		rlock_args_script(args, script, n);
		for (i = 0; i < n; i++)
			rlock_args_add(args, holds[i].key, holds[i].keylen);
		rlock_args_int(args, ms);
		for (i = 0; i < n; i++)
			plain_add_owner(args, holds[i].owner_id);
	}
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = n;
}

static RlockBatchResult
plain_batch_result(const RlockReply *reply, int i)
{
	switch (reply->element[i]->integer)
	{
		case 0:
			return RLOCK_BATCH_NOT_HELD;
		case 1:
			return RLOCK_BATCH_HELD;
		case 2:
			/* only a cluster's node says so */
			return rlock_redis_cluster() ? RLOCK_BATCH_ELSEWHERE :
				RLOCK_BATCH_INVALID;
	}
	return RLOCK_BATCH_INVALID;
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
 * EVALSHA force 2 key channel PUBLISH
 */
static void
plain_force(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	RlockKindHold hold = {key, keylen, 0};

	rlock_args_script(args, script_force, rlock_redis_cluster() ? 1 : 2);
	rlock_args_add(args, key, keylen);
	if (!rlock_redis_cluster())
		plain_add_derived(args, &hold, true);
	plain_add_publish(args, &hold);
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
	"plain",
	plain_init,
	plain_acquire,
	plain_acquire_result,
	plain_release,
	plain_release_result,
	plain_batch,
	plain_batch_result,
	plain_probe,
	plain_force,
	plain_holder,
	plain_holder_result
};
