/*-------------------------------------------------------------------------
 *
 * latch.c
 *		The latch kind's commands and replies: Redisson's count-down
 *		latch (getCountDownLatch), set, counted down and waited for by
 *		SQL sessions and Java alike.
 *
 * The latch is a string holding its count, deleted when the count
 * reaches zero, at which point "0" is published on
 * redisson_countdownlatch__channel__{NAME} (braces even around a name
 * that has some, as Redisson names it); setting or deleting a latch
 * publishes "1".  Its calls (set, count down, count, delete) are the
 * kind's call method.  A wait for zero goes through the request path as
 * an acquire that is granted when the count is zero and holds nothing:
 * the session gives the "hold" back at once (sql.c), and its release
 * writes nothing.  So a wait is woken by "0" on the channel, bounded by
 * the wait, lock_timeout and statement_timeout, and cancelled as a lock's
 * wait is.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/latch/latch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "rlock.h"
#include "kinds/kinds.h"
#include "kinds/latch/scripts.h"
#include "kinds/latch/latch.h"

static int	script_acquire;
static int	script_release;
static int	script_check;
static int	script_call;

static void
latch_init(void)
{
	script_acquire = rlock_script_register("latch_wait", acquire_lua);
	script_release = rlock_script_register("latch_release", release_lua);
	script_check = rlock_script_register("latch_check", check_lua);
	script_call = rlock_script_register("latch_call", call_lua);
}

/*
 * redisson_countdownlatch__channel__{NAME}, in braces whatever the name
 * (RLOCK_CHANNEL_MAXLEN has room for it)
 */
static int
latch_channel(char *buf, const char *key, int keylen)
{
	int			len = strlen(RLOCK_LATCH_PREFIX);

	memcpy(buf, RLOCK_LATCH_PREFIX, len);
	buf[len++] = '{';
	memcpy(buf + len, key, keylen);
	len += keylen;
	buf[len++] = '}';
	buf[len] = '\0';
	return len;
}

/*
 * EVALSHA latch_wait 1 name: granted at zero
 */
static void
latch_acquire(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			  RlockAmount target, int64 lease_ms, bool want_token)
{
	rlock_args_script(args, script_acquire, 1);
	rlock_args_add(args, hold->key, hold->keylen);
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 2;
}

static bool
latch_acquire_result(const RlockReply *reply, RlockAcquired *result)
{
	int64		status = reply->element[0]->integer;

	result->granted = (status == 1);
	result->lost = false;
	result->value = result->granted ? 0 : -1;
	result->blocker = 0;
	return (status == 0 || status == 1) && reply->element[1]->integer >= -1;
}

/*
 * EVALSHA latch_release 0: nothing to give back
 */
static void
latch_release(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			  RlockAmount target, int64 lease_ms)
{
	rlock_args_script(args, script_release, 0);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

static RlockReleased
latch_release_result(const RlockReply *reply, RlockAmount *freed)
{
	*freed = 0;
	return reply->integer == 0 ? RLOCK_RELEASED_KEPT : RLOCK_RELEASED_INVALID;
}

static void
latch_batch(RlockArgs *args, RlockCmd *cmd, RlockBatchKind which, int64 ms,
			const RlockKindHold *holds, int n)
{
	rlock_kind_batch(args, cmd, script_check, ms, holds, n);
}

/*
 * "0" (the count reached zero) lets every waiter look, and so does "1"
 * (set, or deleted: a deleted latch is open, though Redisson's waiters
 * read the message as "closed"); anything else none
 */
static int
latch_wake(const char *payload, int len)
{
	return (len == 1 && (payload[0] == '0' || payload[0] == '1')) ?
		RLOCK_WAKE_ALL : 0;
}

static int
latch_hand_off(RlockAmount left)
{
	return 0;
}

/*
 * EVALSHA latch_call 1|2 name [channel] which arg publish...
 */
static void
latch_call(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen,
		   int which, int64 arg)
{
	char	   *channel = palloc(RLOCK_CHANNEL_MAXLEN(keylen));
	int			len = latch_channel(channel, key, keylen);

	rlock_kind_script(args, script_call, 1, 1);
	rlock_args_add(args, key, keylen);
	rlock_kind_channel(args, channel, len);
	rlock_args_int(args, which);
	rlock_args_int(args, arg);
	rlock_kind_publish(args, channel, len);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

const RlockKindMethod rlock_kind_latch = {
	.init = latch_init,
	.step = 1,
	.acquire = latch_acquire,
	.acquire_result = latch_acquire_result,
	.release = latch_release,
	.release_result = latch_release_result,
	.batch = latch_batch,
	.batch_result = rlock_kind_batch_result,
	.channel = latch_channel,
	.wake = latch_wake,
	.hand_off = latch_hand_off,
	.free_message = "0",
	.acquire_rereads = false,
	.call = latch_call,
};
