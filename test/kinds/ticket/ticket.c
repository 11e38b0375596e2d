/*-------------------------------------------------------------------------
 *
 * ticket.c
 *		A lock kind for tests only: the ticket, an exclusive lock kept as
 *		the string "<owner> <amount>", with its own channel and message.
 *
 * It differs from the plain kind wherever a kind may: its layout, kept at
 * a name of its own ("rlock_ticket_lock:{key}", so that one session may
 * hold a key as a ticket and as a plain lock at once), its channel
 * ("rlock_ticket:{key}"), the message that frees it ("free",
 * which wakes one waiter; "all" wakes every one), and its step (2: one
 * hold is an amount of 2, so Redis shows what the worker sends).  It is
 * built into rlock.so only by make RLOCK_TEST_KINDS=1, and shows that a
 * kind is its folder and its line in the list of kinds.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/kinds/ticket/ticket.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "kinds/kinds.h"
#include "ticket/scripts.h"

#define TICKET_STEP		2

static int	script_acquire;
static int	script_release;
static int	script_renew;
static int	script_verify;
static int	script_force;
static int	script_holder;
static int	script_probe;

static void
ticket_init(void)
{
	script_acquire = rlock_script_register("ticket acquire", acquire_lua);
	script_release = rlock_script_register("ticket release", release_lua);
	script_renew = rlock_script_register("ticket renew", renew_lua);
	script_verify = rlock_script_register("ticket verify", verify_lua);
	script_force = rlock_script_register("ticket force", force_lua);
	script_holder = rlock_script_register("ticket holder", holder_lua);
	script_probe = rlock_script_register("ticket probe", probe_lua);
}

static int
ticket_channel(char *buf, const char *key, int keylen)
{
	return rlock_derived_name(buf, "rlock_ticket:", key, keylen);
}

/*
 * The ticket's Redis key, palloc'd, and its length in *len
 */
static char *
ticket_key(const char *key, int keylen, int *len)
{
	char	   *name = palloc(RLOCK_CHANNEL_MAXLEN(keylen));

	*len = rlock_derived_name(name, "rlock_ticket_lock:", key, keylen);
	return name;
}

static void
ticket_add_key(RlockArgs *args, const char *key, int keylen)
{
	int			len;
	char	   *name = ticket_key(key, keylen, &len);

	rlock_args_add(args, name, len);
	pfree(name);
}

static int
ticket_wake(const char *payload, int len)
{
	if (len == 3 && memcmp(payload, "all", 3) == 0)
		return RLOCK_WAKE_ALL;
	return (len == 4 && memcmp(payload, "free", 4) == 0) ? 1 : 0;
}

static int
ticket_hand_off(RlockAmount left)
{
	return left == 0 ? 1 : 0;
}

static void
ticket_acquire(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			   RlockAmount amount, int64 lease_ms, bool want_token)
{
	Assert(amount % TICKET_STEP == 0);
	rlock_args_script(args, script_acquire, 1);
	ticket_add_key(args, hold->key, hold->keylen);
	rlock_args_int(args, lease_ms);
	rlock_kind_owner(args, hold);
	rlock_args_int(args, amount);
	rlock_args_int(args, hold->held);
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = 2;
}

static bool
ticket_acquire_result(const RlockReply *reply, RlockAcquired *result)
{
	int64		status = reply->element[0]->integer;

	result->granted = (status == 1 || status == 2);
	result->lost = (status == 2 || status == 3);
	result->value = result->granted ? 0 : reply->element[1]->integer;
	return status >= 0 && status <= 3;
}

static void
ticket_release(RlockArgs *args, RlockCmd *cmd, const RlockKindHold *hold,
			   RlockAmount amount, int64 lease_ms)
{
	char	   *channel = palloc(RLOCK_CHANNEL_MAXLEN(hold->keylen));
	int			len = ticket_channel(channel, hold->key, hold->keylen);

	rlock_kind_script(args, script_release, 1, 1);
	ticket_add_key(args, hold->key, hold->keylen);
	rlock_kind_channel(args, channel, len);
	rlock_kind_owner(args, hold);
	rlock_args_int(args, amount);
	rlock_args_int(args, lease_ms);
	rlock_kind_publish(args, channel, len);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGER_OR_NIL;
}

static RlockReleased
ticket_release_result(const RlockReply *reply, RlockAmount *freed)
{
	*freed = 0;
	if (reply->type == RLOCK_REPLY_NIL)
		return RLOCK_RELEASED_NOT_HELD;
	if (reply->integer == 0)
		return RLOCK_RELEASED_KEPT;
	if (reply->integer != 1)
		return RLOCK_RELEASED_INVALID;
	*freed = 1;
	return RLOCK_RELEASED_FREED;
}

static void
ticket_batch(RlockArgs *args, RlockCmd *cmd, RlockBatchKind which, int64 ms,
			 const RlockKindHold *holds, int n)
{
	RlockKindHold *named = palloc(sizeof(RlockKindHold) * n);
	int			i;

	for (i = 0; i < n; i++)
	{
		named[i] = holds[i];
		named[i].key = ticket_key(holds[i].key, holds[i].keylen,
								  &named[i].keylen);
	}
	rlock_kind_batch(args, cmd, which == RLOCK_BATCH_RENEW ? script_renew :
					 script_verify, ms, named, n);
	for (i = 0; i < n; i++)
		pfree((char *) named[i].key);
	pfree(named);
}

static void
ticket_probe(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	rlock_args_script(args, script_probe, 1);
	ticket_add_key(args, key, keylen);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

static void
ticket_force(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	char	   *channel = palloc(RLOCK_CHANNEL_MAXLEN(keylen));
	int			len = ticket_channel(channel, key, keylen);

	rlock_kind_script(args, script_force, 1, 1);
	ticket_add_key(args, key, keylen);
	rlock_kind_channel(args, channel, len);
	rlock_kind_publish(args, channel, len);
	pfree(channel);
	cmd->shape = RLOCK_SHAPE_INTEGER;
}

static void
ticket_holder(RlockArgs *args, RlockCmd *cmd, const char *key, int keylen)
{
	rlock_args_script(args, script_holder, 1);
	ticket_add_key(args, key, keylen);
	cmd->shape = RLOCK_SHAPE_ARRAY;
}

/*
 * The holder's text in rlock_holder()'s form: owner, amount, no instance
 * name, no pid, one owner; "" when free.
 */
static bool
ticket_holder_result(const RlockReply *reply, char *buf, int buflen,
					 int64 *lease_ms)
{
	RlockReply **e = reply->element;

	if (reply->type != RLOCK_REPLY_ARRAY)
		return false;
	if (reply->elements == 0)
	{
		buf[0] = '\0';
		*lease_ms = -2;
		return true;
	}
	if (reply->elements != 3 || e[0]->type != RLOCK_REPLY_STRING ||
		e[1]->type != RLOCK_REPLY_STRING || e[2]->type != RLOCK_REPLY_INTEGER)
		return false;
	snprintf(buf, buflen, "%.*s\n%.*s\n\n\n1", Min(e[0]->len, 120),
			 e[0]->str, Min(e[1]->len, 20), e[1]->str);
	*lease_ms = e[2]->integer;
	return true;
}

const RlockKindMethod rlock_kind_ticket = {
	.init = ticket_init,
	.step = TICKET_STEP,
	.acquire = ticket_acquire,
	.acquire_result = ticket_acquire_result,
	.release = ticket_release,
	.release_result = ticket_release_result,
	.batch = ticket_batch,
	.batch_result = rlock_kind_batch_result,
	.probe = ticket_probe,
	.force = ticket_force,
	.holder = ticket_holder,
	.holder_result = ticket_holder_result,
	.channel = ticket_channel,
	.wake = ticket_wake,
	.hand_off = ticket_hand_off,
	.free_message = "free"
};
