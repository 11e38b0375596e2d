/*-------------------------------------------------------------------------
 *
 * registry.c
 *		This instance's entry in Redis: its name, and the process of
 *		each session holding locks.
 *
 * A lock's owner is "<uuid>:<n>": the instance's uuid and a session's
 * number.  Another instance that finds the lock held can tell who holds it
 * only if the holder's instance says so: the worker keeps the hash
 * rlock_instance:{<uuid>} with the field "name" (rlock.instance_name, else
 * cluster_name, else host:port) and one field per session that holds
 * locks, <n> -> pid.  It rewrites the hash whole when it connects, when a
 * new session appears (at most once a second), and every 10 s, as long as
 * any session holds locks, and lets it expire after 30 s, so an instance
 * that is gone, or holds nothing, leaves no entry.  rlock_holder() reads it (kinds/plain/holder.lua).
 *
 * A Redis that refuses the script (an ACL without those keys) costs only
 * the names: it is logged once and tried again each period.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/worker/registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "worker/worker_int.h"
#include "worker/scripts.h"

static int	script_register = -1;
static bool registry_dirty = true;
static bool registry_inflight = false;
static bool registry_refusal_logged = false;
static TimestampTz registry_next = 0;	/* the periodic rewrite */
static TimestampTz registry_sent_at = 0;

/* A new session is announced at most this often (a burst of short
 * sessions costs one rewrite a second, not one each) */
#define RLOCK_REGISTRY_GAP_MS	1000

/* Rewritten this often, and kept three times as long */
#define RLOCK_REGISTRY_PERIOD_MS	10000

void
rlock_registry_init(void)
{
	script_register = rlock_script_register("register", register_lua);
}

/*
 * Something the entry shows changed (a new session, a new connection):
 * rewrite it at the end of this pass.
 */
void
rlock_registry_touch(void)
{
	registry_dirty = true;
}

/*
 * The name other instances see.
 */
static void
registry_add_name(RlockArgs *args)
{
	char		name[RLOCK_INSTANCE_NAME_LEN];

	rlock_instance_display_name(name, sizeof(name));
	rlock_args_cstr(args, name);
}

static void
registry_add_owner(uint64 owner_id, int pid, void *arg)
{
	RlockArgs  *args = (RlockArgs *) arg;

	rlock_args_int(args, (int64) owner_id);
	rlock_args_int(args, pid);
}

static TimestampTz
registry_due(void)
{
	return registry_dirty ?
		TimestampTzPlusMilliseconds(registry_sent_at, RLOCK_REGISTRY_GAP_MS) :
		registry_next;
}

void
rlock_registry_tick(TimestampTz now)
{
	RlockConn  *conn;
	RlockArgs  *args;
	WorkerCmd  *wc;
	char		key[RLOCK_UUID_LEN + 32];

	snprintf(key, sizeof(key), "rlock_instance:{%s}", rlock_shared->uuid);
	conn = rlock_redis_route(key, strlen(key));
	if (rlock_owners_changed())
		registry_dirty = true;
	if (registry_inflight || !rlock_conn_ready(conn) || now < registry_due())
		return;

	args = worker_args();
	rlock_args_script(args, script_register, 1);
	rlock_args_cstr(args, key);
	rlock_args_int(args, 3 * RLOCK_REGISTRY_PERIOD_MS);
	registry_add_name(args);
	rlock_owners_each(registry_add_owner, args);

	registry_dirty = false;
	registry_next = TimestampTzPlusMilliseconds(now, RLOCK_REGISTRY_PERIOD_MS);
	if (args->argc == 6)
		return;					/* no session holds anything: nobody asks */
	wc = worker_cmd_new(WORKER_CMD_REGISTER);
	wc->cmd.shape = RLOCK_SHAPE_INTEGER;
	registry_sent_at = now;
	if (worker_cmd_send(conn, wc, args))
		registry_inflight = true;
}

/*
 * When the entry is due again; never while no rewrite could go out.
 */
TimestampTz
rlock_registry_next(void)
{
	if (registry_inflight || !rlock_conn_ready(rlock_redis_command_conn()))
		return DT_NOEND;
	return registry_due();
}

void
rlock_registry_reply(RlockConn *conn, WorkerCmd *wc, const RlockReply *reply)
{
	registry_inflight = false;
	if (reply == NULL)
	{
		registry_dirty = true;	/* again on the next connection */
		return;
	}
	if (reply->type != RLOCK_REPLY_ERROR)
		return;
	if (rlock_reply_classify(reply) == RLOCK_REPLY_NOSCRIPT &&
		rlock_scripts_reload(conn, &wc->cmd))
	{
		registry_dirty = true;
		return;
	}
	if (!registry_refusal_logged)
	{
		ereport(LOG,
				(errmsg("rlock could not register this instance in Redis: %s",
						reply->str),
				 errdetail("Other instances will not see this instance's name and process ids in rlock_holder().")));
		registry_refusal_logged = true;
	}
}
