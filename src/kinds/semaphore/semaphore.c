/*-------------------------------------------------------------------------
 *
 * semaphore.c
 *		The semaphore kind's commands and replies: Redisson's
 *		permit-expirable semaphore (getPermitExpirableSemaphore), whose
 *		permits SQL sessions, rlock instances and Java share.
 *
 * The name is a string holding the permits available; beside it a sorted
 * set ({NAME}:timeout) holds the permits taken, each scored by the end of
 * its lease, which any client's script gives back to the pool once it
 * has passed.  rlock's owner holds its permits as the members
 * "<owner>:1" to "<owner>:<n>": a command names the number to leave, so
 * it may be sent again (kinds/README.md), and the watchdog renews them as
 * it renews locks.  Releases publish the available count on
 * redisson_sc:{NAME}, where Redisson's waiters (which have no timer) and
 * rlock's listen; a message wakes as many waiters as it says permits.
 * No hand-off, no transfer: a freed permit goes to whoever asks first.
 *
 * Leases are Redis's clock (TIME) here; Redisson's clients compare with
 * their own clocks, which must agree (doc/redisson.md).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/semaphore/semaphore.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "rlock.h"
#include "kinds/kinds.h"
#include "kinds/semaphore/scripts.h"
#include "kinds/semaphore/semaphore.h"

static int	script_acquire;
static int	script_release;
static int	script_renew;
static int	script_verify;
static int	script_call;

static void
semaphore_init(void)
{
	script_acquire = rlock_script_register("semaphore_acquire", acquire_lua);
	script_release = rlock_script_register("semaphore_release", release_lua);
	script_renew = rlock_script_register("semaphore_renew", renew_lua);
	script_verify = rlock_script_register("semaphore_verify", verify_lua);
	script_call = rlock_script_register("semaphore_call", call_lua);
}

/*
 * The channel: redisson_sc:{NAME}, Redisson's for both its semaphores
 */
static int
semaphore_channel(char *buf, const char *key, int keylen)
{
	return rlock_derived_name(buf, RLOCK_SEMAPHORE_PREFIX, key, keylen);
}

/*
 * A command on the semaphore that may publish: its name and its permits
 * held ({NAME}:timeout, Redisson's suffixName: the name's slot), the
 * channel where channels are keys; the caller adds the script's own
 * arguments and then publish_end's.  Returns the channel (palloc'd).
 */
static char *
semaphore_command(RlockArgs *args, int script, const char *key, int keylen,
				  int *len)
{
	char	   *name = palloc(keylen + sizeof(":timeout") + 2);
	char	   *channel = palloc(RLOCK_CHANNEL_MAXLEN(keylen));

	rlock_kind_script(args, script, 2, 1);
	rlock_args_add(args, key, keylen);
	rlock_args_add(args, name,
				   rlock_suffixed_name(name, key, keylen, ":timeout"));
	pfree(name);
	*len = semaphore_channel(channel, key, keylen);
	rlock_kind_channel(args, channel, *len);
	return channel;
}

static void
publish_end(RlockArgs *args, char *channel, int len)
{
	rlock_kind_publish(args, channel, len);
	pfree(channel);
}

/*
 * EVALSHA semaphore_acquire 2|3 name timeout [channel] lease owner target
 * held publish...
 */
static void
semaphore_acquire(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
				  RlockAmount target, int64 lease_ms, bool want_token)
{
	int			len;
	char	   *channel = semaphore_command(args, script_acquire, hold->key,
											hold->keylen, &len);

	Assert(!want_token && target <= SEMAPHORE_MAX_PERMITS);
	rlock_args_int(args, lease_ms);
	rlock_kind_owner(args, hold);
	rlock_args_int(args, target);
	rlock_args_int(args, hold->held);
	publish_end(args, channel, len);
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 2;
}

/*
 * {status, value}: 1 granted, 2 granted with the earlier permits gone, 0
 * too few, 3 too few with the earlier permits gone; value: when a held
 * permit's lease ends next (-1: none ends)
 */
static bool
semaphore_acquire_result(const RlockReply *reply, RlockAcquired *result)
{
	int64		status = reply->element[0]->integer;
	int64		value = reply->element[1]->integer;

	result->granted = (status == 1 || status == 2);
	result->lost = (status == 2 || status == 3);
	result->value = result->granted ? 0 : value;
	result->blocker = 0;
	return status >= 0 && status <= 3 && value >= -1;
}

/*
 * EVALSHA semaphore_release 2|3 name timeout [channel] owner target lease
 * publish...
 */
static void
semaphore_release(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
				  RlockAmount target, int64 lease_ms)
{
	int			len;
	char	   *channel = semaphore_command(args, script_release, hold->key,
											hold->keylen, &len);

	rlock_kind_owner(args, hold);
	rlock_args_int(args, target);
	rlock_args_int(args, lease_ms);
	publish_end(args, channel, len);
	cmd->shape = RLOCK_SHAPE_INTEGER_OR_NIL;
}

/*
 * nil: the owner held no permit; else the permits given back (0: none)
 */
static RlockReleased
semaphore_release_result(const RlockReply *reply, RlockAmount *freed)
{
	*freed = 0;
	if (reply->type == RLOCK_REPLY_NIL)
		return RLOCK_RELEASED_NOT_HELD;
	if (reply->integer < 0 || reply->integer > SEMAPHORE_MAX_PERMITS)
		return RLOCK_RELEASED_INVALID;
	if (reply->integer == 0)
		return RLOCK_RELEASED_KEPT;
	*freed = (RlockAmount) reply->integer;
	return RLOCK_RELEASED_FREED;
}

static void
semaphore_batch(RlockArgs *args, RlockCmd *cmd, RlockBatchKind which,
				int64 ms, const RlockKindHold *holds, int n)
{
	rlock_kind_batch(args, cmd, which == RLOCK_BATCH_RENEW ? script_renew :
					 script_verify, ms, holds, n);
}

/*
 * A message says how many permits are available (Redisson publishes the
 * count, or what was added): that many waiters may try.  Anything else
 * wakes nobody.
 */
static int
semaphore_wake(const char *payload, int len)
{
	int64		n = 0;
	int			i;

	if (len < 1 || len > 18)
		return 0;
	for (i = 0; i < len; i++)
	{
		if (payload[i] < '0' || payload[i] > '9')
			return 0;
		n = n * 10 + (payload[i] - '0');
	}
	return n >= 64 ? RLOCK_WAKE_ALL : (int) n;
}

static int
semaphore_hand_off(RlockAmount left)
{
	return 0;
}

/*
 * EVALSHA semaphore_call 2|3 name timeout [channel] which arg publish...
 */
static void
semaphore_call(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen,
			   int which, int64 arg)
{
	int			len;
	char	   *channel = semaphore_command(args, script_call, key, keylen,
											&len);

	rlock_args_int(args, which);
	rlock_args_int(args, arg);
	publish_end(args, channel, len);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

const RlockKindMethod rlock_kind_semaphore = {
	.init = semaphore_init,
	.step = 1,
	.acquire = semaphore_acquire,
	.acquire_result = semaphore_acquire_result,
	.release = semaphore_release,
	.release_result = semaphore_release_result,
	.batch = semaphore_batch,
	.batch_result = rlock_kind_batch_result,
	.channel = semaphore_channel,
	.wake = semaphore_wake,
	.hand_off = semaphore_hand_off,
	.free_message = "1",
	.acquire_rereads = false,
	.call = semaphore_call,
};
