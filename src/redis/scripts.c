/*-------------------------------------------------------------------------
 *
 * scripts.c
 *		The Lua scripts rlock runs in Redis, and their loading.
 *
 * The data they keep is Redisson's RLock layout: a hash at the lock key
 * with one field per owner ("<uuid>:<n>") holding the hold count, and a
 * PEXPIRE lease on the key.  A full release deletes the key and publishes
 * "0" on the lock's channel, which wakes Redisson waiters and ours alike.
 *
 * Unlike Redisson, the acquire and release scripts take the hold count to
 * leave in Redis rather than a step of +1 or -1.  The worker is the only
 * writer of its owners' fields and knows the count each command should
 * leave, so sending the target makes every command idempotent: one whose
 * reply was lost can be sent again, or undone, without counting twice.
 *
 * The scripts are loaded with SCRIPT LOAD during the handshake of each new
 * command connection, and run with EVALSHA.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/scripts.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "worker/worker_int.h"

/*
 * Acquire.  KEYS[1] lock, and KEYS[2] its fencing token counter when the
 * caller asks for a token; ARGV[1] lease in ms, ARGV[2] owner, ARGV[3] hold
 * count to leave.  Takes the lock when it is free or already ours, setting
 * the count and resetting the lease, and counts a token (Redisson's fenced
 * lock counts one on every acquisition, re-entry included).  The token is
 * counted first: Redis does not undo a script's writes when a later
 * command fails, and a counter that cannot be incremented must not leave a
 * lock behind.  After that first write nothing can fail (the reads before
 * it raise WRONGTYPE, and Redis refuses a script for lack of memory only
 * at its first write).  Returns {1, token} when taken; {2, token} when taken
 * although the owner expected to hold it already and did not (its earlier
 * holds were lost); {0, ttl} when someone else holds it, ttl being the
 * key's remaining time to live in ms (-1 when it has no expiry), which
 * bounds how long a waiter sleeps; {3, ttl} when someone else holds it
 * although the owner expected to hold it already.
 */
static const char acquire_script[] =
"local held = redis.call('hexists', KEYS[1], ARGV[2]) == 1 "
"local reentry = tonumber(ARGV[3]) > 1 "
"if held or redis.call('exists', KEYS[1]) == 0 then "
"local token = 0 "
"if #KEYS > 1 then token = redis.call('incr', KEYS[2]) end "
"redis.call('hset', KEYS[1], ARGV[2], ARGV[3]) "
"redis.call('pexpire', KEYS[1], ARGV[1]) "
"if reentry and not held then return {2, token} end "
"return {1, token} "
"end "
"if reentry then return {3, redis.call('pttl', KEYS[1])} end "
"return {0, redis.call('pttl', KEYS[1])}";

/*
 * Release.  KEYS[1] lock, KEYS[2] channel; ARGV[1] owner, ARGV[2] hold
 * count to leave, ARGV[3] lease in ms for the holds that remain, ARGV[4]
 * the publish command.  Returns nil when the owner has no hold (the lease
 * ran out, or someone removed it), 0 when holds remain (the lease is reset
 * to ARGV[3]), 1 when the lock was freed and "0" published.
 */
static const char release_script[] =
"if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then "
"return nil "
"end "
"if tonumber(ARGV[2]) > 0 then "
"redis.call('hset', KEYS[1], ARGV[1], ARGV[2]) "
"redis.call('pexpire', KEYS[1], ARGV[3]) "
"return 0 "
"end "
"redis.call('del', KEYS[1]) "
"redis.call(ARGV[4], KEYS[2], '0') "
"return 1";

/*
 * Renew a batch.  KEYS[i] lock; ARGV[1] lease in ms, ARGV[i + 1] owner of
 * KEYS[i].  Resets the lease of every lock its owner still holds.  Returns
 * one 1 (renewed) or 0 (not held: stop renewing) per key.  A key of the
 * wrong type counts as not held rather than failing the whole batch.
 */
static const char renew_script[] =
"local result = {} "
"for i = 1, #KEYS do "
"local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1]) "
"if held == 1 then "
"redis.call('pexpire', KEYS[i], ARGV[1]) "
"result[i] = 1 "
"else "
"result[i] = 0 "
"end "
"end "
"return result";

/*
 * Verify before a commit.  KEYS[i] lock; ARGV[1] safety margin in ms,
 * ARGV[i + 1] owner of KEYS[i].  For every lock its owner still holds,
 * makes sure at least the margin of lease is left (extending it if not).
 * Returns one 1 (held) or 0 (not held: lost) per key.
 */
static const char verify_script[] =
"local result = {} "
"for i = 1, #KEYS do "
"if redis.pcall('hexists', KEYS[i], ARGV[i + 1]) == 1 then "
"local ttl = redis.call('pttl', KEYS[i]) "
"if ttl >= 0 and ttl < tonumber(ARGV[1]) then "
"redis.call('pexpire', KEYS[i], ARGV[1]) "
"end "
"result[i] = 1 "
"else "
"result[i] = 0 "
"end "
"end "
"return result";

static const char *const script_text[RLOCK_NSCRIPTS] = {
	acquire_script,
	release_script,
	renew_script,
	verify_script
};

/* SHA1 of each script as Redis reported it, hex */
static char script_sha[RLOCK_NSCRIPTS][41];

/*
 * Queue SCRIPT LOAD of every script, as part of a connection's handshake.
 */
void
rlock_scripts_load(RlockConn *conn)
{
	int			i;

	for (i = 0; i < RLOCK_NSCRIPTS; i++)
	{
		const char *argv[3];
		size_t		lens[3];
		RlockCmd   *cmd = rlock_cmd_new(RLOCK_CMD_SCRIPT_LOAD);

		cmd->index = i;
		argv[0] = "SCRIPT";
		lens[0] = 6;
		argv[1] = "LOAD";
		lens[1] = 4;
		argv[2] = script_text[i];
		lens[2] = strlen(script_text[i]);
		(void) rlock_conn_send(conn, cmd, 3, argv, lens);
	}
}

/*
 * Record the SHA1 Redis returned for a script.  False if it does not look
 * like one.
 */
bool
rlock_script_loaded(int index, const char *sha, int len)
{
	if (index < 0 || index >= RLOCK_NSCRIPTS || len != 40)
		return false;
	memcpy(script_sha[index], sha, 40);
	script_sha[index][40] = '\0';
	return true;
}

const char *
rlock_script_sha(RlockScript script)
{
	return script_sha[script];
}

/*
 * Does a Redis error say that a script is not in its cache (after SCRIPT
 * FLUSH, say)?  The caller reloads the scripts and tries once more.
 */
bool
rlock_script_missing(const char *error)
{
	return strncmp(error, "NOSCRIPT", 8) == 0;
}

