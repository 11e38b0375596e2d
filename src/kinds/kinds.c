/*-------------------------------------------------------------------------
 *
 * kinds.c
 *		The table of lock kinds, and what every kind's commands share:
 *		where keys and channels go, and the batches.
 *
 * Indexed by RlockKind, the number every request and hold entry carries.
 * A new kind adds its folder and its line in shared.h's list, which makes
 * its number, its name and its place here.
 *
 * The topology decides where a script's names go: a channel is a declared
 * key outside a Redis Cluster and an argument in one, and a batch of
 * holds of many slots goes undeclared in a cluster.  That decision is
 * made here and nowhere else, so that no kind asks which topology it
 * serves; the shared Lua (publish.lua, batch.lua) reads the names where
 * these functions put them.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/kinds.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "kinds/kinds.h"

/* in the order of their numbers: shared.h's list makes both */
#define RLOCK_KIND_ENTRY(NUMBER, name) &rlock_kind_##name,
const RlockKindMethod *const rlock_kinds[RLOCK_NKINDS] = {
	RLOCK_KIND_LIST(RLOCK_KIND_ENTRY)
	RLOCK_TEST_KIND_LIST(RLOCK_KIND_ENTRY)
};

/*
 * Register the scripts of every kind (the worker, before it connects).
 */
void
rlock_kinds_init(void)
{
	int			i;

	for (i = 0; i < RLOCK_NKINDS; i++)
		rlock_kinds[i]->init();
}

/*
 * Whether channels go among a script's keys: everywhere but in a Redis
 * Cluster, where a declared channel would make a migrating slot answer
 * TRYAGAIN (its slot is the key's anyway: the names share a hash tag).
 */
static bool
rlock_kind_channels_are_keys(void)
{
	return !rlock_redis_cluster();
}

/*
 * Start EVALSHA of a script whose keys are nkeys keys followed by
 * nchannels channels (rlock_kind_channel adds them).
 */
void
rlock_kind_script(RlockArgs *args, int script, int nkeys, int nchannels)
{
	Assert(nkeys >= 0 && nchannels >= 0);
	rlock_args_script(args, script, nkeys +
					  (rlock_kind_channels_are_keys() ? nchannels : 0));
}

/*
 * A channel, after the script's keys: declared where channels are keys,
 * else left to rlock_kind_publish.
 */
void
rlock_kind_channel(RlockArgs *args, const char *channel, int len)
{
	if (rlock_kind_channels_are_keys())
		rlock_args_add(args, channel, len);
}

/*
 * The publish command for a channel, last among the arguments: SPUBLISH
 * where messages go to shard channels, else PUBLISH; in a Redis Cluster,
 * followed by the channel (not declared) and by PUBLISH when messages go
 * both ways.  publish.lua's rlock_publish() reads them.
 */
void
rlock_kind_publish(RlockArgs *args, const char *channel, int len)
{
	int			pubsub = rlock_redis_pubsub();

	rlock_args_cstr(args, (pubsub & RLOCK_PUBSUB_SHARDED) ?
					"SPUBLISH" : "PUBLISH");
	if (rlock_kind_channels_are_keys())
		return;
	rlock_args_add(args, channel, len);
	if (pubsub == (RLOCK_PUBSUB_SHARDED | RLOCK_PUBSUB_CLASSIC))
		rlock_args_cstr(args, "PUBLISH");
}

/*
 * The owner of a hold, as the hash field Redisson's layout names it:
 * "<uuid>:<n>", n being the session's number plus the hold's mode
 * (RLOCK_OWNER_FIELD).
 */
void
rlock_kind_owner(RlockArgs *args, const RlockKindHold *hold)
{
	char		owner[RLOCK_OWNER_MAXLEN];

	rlock_args_add(args, owner,
				   rlock_owner_name(owner, RLOCK_OWNER_FIELD(hold->owner_id,
															 hold->mode)));
}

/*
 * EVALSHA script n key... ms owner..., or in a Redis Cluster, where the
 * keys of a batch are of many slots, EVALSHA script 0 ms key owner ...
 * (batch.lua answers 2 for a key the node does not serve).  One hold is
 * declared wherever it is: its one slot lets a redirection follow it.
 */
void
rlock_kind_batch(RlockArgs *args, RlockCmd *cmd, int script, int64 ms,
				 const RlockKindHold *holds, int n)
{
	int			i;

	Assert(n > 0);
	if (rlock_redis_cluster() && n > 1)
	{
		rlock_args_script(args, script, 0);
		rlock_args_int(args, ms);
		for (i = 0; i < n; i++)
		{
			rlock_args_add(args, holds[i].key, holds[i].keylen);
			rlock_kind_owner(args, &holds[i]);
		}
	}
	else
	{
		rlock_args_script(args, script, n);
		for (i = 0; i < n; i++)
			rlock_args_add(args, holds[i].key, holds[i].keylen);
		rlock_args_int(args, ms);
		for (i = 0; i < n; i++)
			rlock_kind_owner(args, &holds[i]);
	}
	cmd->shape = RLOCK_SHAPE_INTEGERS;
	cmd->nelements = n;
}

/*
 * What batch.lua's reply says of hold i: 1 held, 0 not; 2, which only a
 * cluster's node says, is a hold to ask its slot's node about.
 */
RlockBatchResult
rlock_kind_batch_result(const RlockReply *reply, int i)
{
	switch (reply->element[i]->integer)
	{
		case 0:
			return RLOCK_BATCH_NOT_HELD;
		case 1:
			return RLOCK_BATCH_HELD;
		case 2:
			return rlock_redis_cluster() ? RLOCK_BATCH_ELSEWHERE :
				RLOCK_BATCH_INVALID;
	}
	return RLOCK_BATCH_INVALID;
}
