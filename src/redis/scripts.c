/*-------------------------------------------------------------------------
 *
 * scripts.c
 *		The registry of the Lua scripts rlock runs in Redis.
 *
 * Lock kinds register their scripts (src/kinds) before the first
 * connection is made.  Each script's SHA1 is computed here, so commands
 * name a script by a digest rlock knows rather than by whatever a server
 * said; every new command connection loads all scripts with SCRIPT LOAD
 * during its handshake and checks that Redis reports the same digest.
 *
 * A script can vanish from Redis's cache (SCRIPT FLUSH, a restart behind
 * a proxy, a failover): the command then gets NOSCRIPT, and its sender
 * asks for the scripts to be loaded again (rlock_scripts_reload) and
 * sends it once more behind the loads.  A server that keeps answering
 * NOSCRIPT must not make that a loop: loads go out at most once a second
 * per connection, and senders that are refused a reload retry later or
 * fail.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/scripts.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/evp.h>

#include "redis/redis_int.h"

#define RLOCK_MAX_SCRIPTS		64

typedef struct RlockScript
{
	const char *name;			/* for messages */
	const char *text;
	char		sha[RLOCK_SHA1_HEX_LEN + 1];
} RlockScript;

static RlockScript scripts[RLOCK_MAX_SCRIPTS];
static int	nscripts = 0;

/*
 * Hex SHA1 of a script, as Redis names it.
 */
static void
scripts_digest(const char *text, char *hex)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	unsigned int i;

	if (EVP_Digest(text, strlen(text), digest, &len, EVP_sha1(), NULL) != 1 ||
		len * 2 != RLOCK_SHA1_HEX_LEN)
		elog(ERROR, "could not compute the SHA1 of a script");
	for (i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}
/*
 * Add a script to the registry; returns its number.  "name" and "text"
 * must stay valid (they are string constants).
 */
int
rlock_script_register(const char *name, const char *text)
{
	RlockScript *s;

	if (nscripts == RLOCK_MAX_SCRIPTS)
		elog(ERROR, "too many rlock scripts");
	s = &scripts[nscripts];
	s->name = name;
	s->text = text;
	scripts_digest(text, s->sha);
	return nscripts++;
}

int
rlock_scripts_count(void)
{
	return nscripts;
}

const char *
rlock_script_sha(int script)
{
	Assert(script >= 0 && script < nscripts);
	return scripts[script].sha;
}

const char *
rlock_script_name(int script)
{
	Assert(script >= 0 && script < nscripts);
	return scripts[script].name;
}

const char *
rlock_script_text(int script)
{
	Assert(script >= 0 && script < nscripts);
	return scripts[script].text;
}
