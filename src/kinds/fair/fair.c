/*-------------------------------------------------------------------------
 *
 * fair.c
 *		The fair kind's commands and replies: Redisson's fair lock
 *		(getFairLock), taken in the order of a queue that Redisson's
 *		clients and every rlock instance share.
 *
 * The lock is the plain lock's hash; beside it Redisson keeps the queue of
 * the owners waiting (redisson_lock_queue:{key}) and their deadlines
 * (redisson_lock_timeout:{key}), and tells the first owner its turn on a
 * channel of its own (redisson_lock__channel:{key}:<owner>).  rlock's
 * waiter tries at once, which queues it for its wait (without limit:
 * rlock.fair_wait_timeout, as Redisson's lock() takes its
 * fairLockWaitTimeout), listens on its own channel, and tries again when
 * told, or when the lease, or the entry ahead of it, would end.  A waiter
 * that stops waiting leaves the queue at once (give_up); the entry of one
 * whose instance died goes stale at its deadline, as a Redisson client's.
 * No hand-off, no transfer: the next owner is the queue's, whoever it
 * is.
 *
 * What is the same as the plain lock's is the plain kind's: the batches
 * (renew, verify), probe, force and holder, and the meaning of acquire
 * and release replies.  The scripts are this folder's .lua files.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/fair/fair.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "rlock.h"
#include "kinds/kinds.h"
#include "kinds/fair/scripts.h"

static int	script_acquire;
static int	script_release;
static int	script_give_up;

static void
fair_init(void)
{
	script_acquire = rlock_script_register("fair_acquire", acquire_lua);
	script_release = rlock_script_register("fair_release", release_lua);
	script_give_up = rlock_script_register("fair_give_up", give_up_lua);
}

/*
 * The lock's key, then its queue and its owners' deadlines: three keys of
 * the lock's slot.
 */
static void
fair_add_keys(RlockArgs *args, const char *key, int keylen)
{
	char	   *name = palloc(RLOCK_CHANNEL_MAXLEN(keylen));

	rlock_args_add(args, key, keylen);
	rlock_args_add(args, name,
				   rlock_derived_name(name, RLOCK_QUEUE_PREFIX, key, keylen));
	rlock_args_add(args, name,
				   rlock_derived_name(name, RLOCK_DEADLINES_PREFIX, key,
									  keylen));
	pfree(name);
}

/*
 * The lock's channel, Redisson's: what an RLock waiter on the name hears
 */
static int
fair_channel(char *buf, const char *key, int keylen)
{
	return rlock_channel_name(buf, key, keylen);
}

/*
 * A waiter's own channel, where its turn is told: the lock's channel, a
 * colon and the owner
 */
static int
fair_waiter_channel(char *buf, const RlockKindHold *hold)
{
	int			len = rlock_channel_name(buf, hold->key, hold->keylen);

	buf[len++] = ':';
	len += rlock_owner_name(buf + len,
							RLOCK_OWNER_FIELD(hold->owner_id, hold->mode));
	return len;
}

/*
 * The next owner is the queue's: the release tells it on its channel
 */
static int
fair_hand_off(RlockAmount left)
{
	return 0;
}

/*
 * The wait a queued owner's entry is given: the wait it has, or without
 * limit rlock.fair_wait_timeout, as Redisson's lock() takes its
 * fairLockWaitTimeout; 0 for a try that does not queue
 */
static int64
fair_wait(const RlockKindHold *hold)
{
	return hold->queue_ms < 0 ? rlock_fair_wait_timeout : hold->queue_ms;
}

/*
 * EVALSHA fair_acquire 3|4 key queue deadlines [token-key] lease owner
 * target wait: a wait of 0 does not queue
 */
static void
fair_acquire(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			 RlockAmount target, int64 lease_ms, bool want_token)
{
	rlock_args_script(args, script_acquire, want_token ? 4 : 3);
	fair_add_keys(args, hold->key, hold->keylen);
	if (want_token)
	{
		char	   *name = palloc(RLOCK_CHANNEL_MAXLEN(hold->keylen));

		rlock_args_add(args, name,
					   rlock_token_name(name, hold->key, hold->keylen));
		pfree(name);
	}
	rlock_args_int(args, lease_ms);
	rlock_kind_owner(args, hold);
	rlock_args_int(args, target);
	rlock_args_int(args, fair_wait(hold));
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 3;
}

/*
 * A command on the lock, its queue and its deadlines that may publish:
 * the three keys, the channel where channels are keys, then the script's
 * own arguments (the caller's), then the publish commands
 */
static char *
fair_publishing(RlockArgs *args, int script, const RlockKindHold *hold,
				int *len)
{
	char	   *channel = palloc(RLOCK_CHANNEL_MAXLEN(hold->keylen));

	*len = rlock_channel_name(channel, hold->key, hold->keylen);
	rlock_kind_script(args, script, 3, 1);
	fair_add_keys(args, hold->key, hold->keylen);
	rlock_kind_channel(args, channel, *len);
	return channel;
}

/*
 * EVALSHA fair_release 3|4 key queue deadlines [channel] owner target
 * lease publish...
 */
static void
fair_release(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			 RlockAmount target, int64 lease_ms)
{
	int			len;
	char	   *channel = fair_publishing(args, script_release, hold, &len);

	rlock_kind_owner(args, hold);
	rlock_args_int(args, target);
	rlock_args_int(args, lease_ms);
	rlock_kind_publish(args, channel, len);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGER_OR_NIL;
}

/*
 * EVALSHA fair_give_up 3|4 key queue deadlines [channel] owner wait
 * publish...
 */
static void
fair_give_up(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold)
{
	int			len;
	char	   *channel = fair_publishing(args, script_give_up, hold, &len);

	rlock_kind_owner(args, hold);
	rlock_args_int(args, fair_wait(hold));
	rlock_kind_publish(args, channel, len);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

/*
 * What is the plain lock's: the hash, its renewal and check, and what an
 * acquire's or a release's reply says
 */
static bool
fair_acquire_result(const RlockReply *reply, RlockAcquired *result)
{
	return rlock_kind_plain.acquire_result(reply, result);
}

static RlockReleased
fair_release_result(const RlockReply *reply, RlockAmount *freed)
{
	return rlock_kind_plain.release_result(reply, freed);
}

static void
fair_batch(RlockArgs *args, RlockCmd *cmd, RlockBatchKind which, int64 ms,
		   const RlockKindHold *holds, int n)
{
	rlock_kind_plain.batch(args, cmd, which, ms, holds, n);
}

static RlockBatchResult
fair_batch_result(const RlockReply *reply, int i)
{
	return rlock_kind_plain.batch_result(reply, i);
}

static void
fair_probe(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	rlock_kind_plain.probe(args, cmd, key, keylen);
}

static void
fair_force(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	rlock_kind_plain.force(args, cmd, key, keylen);
}

static void
fair_holder(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	rlock_kind_plain.holder(args, cmd, key, keylen);
}

static bool
fair_holder_result(const RlockReply *reply, char *buf, int buflen,
				   int64 *lease_ms)
{
	return rlock_kind_plain.holder_result(reply, buf, buflen, lease_ms);
}

static int
fair_wake(const char *payload, int len)
{
	return rlock_kind_plain.wake(payload, len);
}

const RlockKindMethod rlock_kind_fair = {
	.init = fair_init,
	.step = 1,
	.acquire = fair_acquire,
	.acquire_result = fair_acquire_result,
	.release = fair_release,
	.release_result = fair_release_result,
	.batch = fair_batch,
	.batch_result = fair_batch_result,
	.probe = fair_probe,
	.force = fair_force,
	.holder = fair_holder,
	.holder_result = fair_holder_result,
	.channel = fair_channel,
	.wake = fair_wake,
	.waiter_channel = fair_waiter_channel,
	.hand_off = fair_hand_off,
	.free_message = "0",
	.acquire_rereads = false,
	.give_up = fair_give_up,
};
