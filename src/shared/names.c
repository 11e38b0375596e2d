/*-------------------------------------------------------------------------
 *
 * names.c
 *		Redis names derived from a lock key, as Redisson derives them.
 *
 * A lock named NAME lives in the hash at key NAME.  Its unlock channel is
 * "redisson_lock__channel:{NAME}" and its fencing token counter
 * "redisson_lock_token:{NAME}", where the braces are left out when NAME
 * already contains "{" (Redisson keeps the user's own cluster hash tag).
 * The hash field of a holder is "<uuid>:<n>": the instance's uuid and a
 * number unique to one backend session.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/names.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "postmaster/postmaster.h"
#include "utils/guc.h"

#include "shared/shared.h"

/*
 * Write the key at buf in braces, its hash tag, unless it has a brace
 * already (Redisson's names keep such a key as it is); returns the length
 * written, keylen plus 2 at most.  No NUL.
 */
static int
names_hash_tagged(char *buf, const char *key, int keylen)
{
	int			len = 0;
	bool		braces = (memchr(key, '{', keylen) == NULL);

	if (braces)
		buf[len++] = '{';
	memcpy(buf + len, key, keylen);
	len += keylen;
	if (braces)
		buf[len++] = '}';
	return len;
}

/*
 * Write a name Redisson derives from a lock key into buf: the prefix, then
 * the key in braces, or as it is when it contains "{" already.  buf must
 * have room for RLOCK_CHANNEL_MAXLEN(keylen) bytes: a prefix is at most
 * as long as the channel's.  Returns the length.  A kind's own names
 * (its channel) are made with it too.
 */
int
rlock_derived_name(char *buf, const char *prefix, const char *key, int keylen)
{
	int			len = strlen(prefix);

	Assert(len <= strlen(RLOCK_LATCH_PREFIX));
	memcpy(buf, prefix, len);
	len += names_hash_tagged(buf + len, key, keylen);
	buf[len] = '\0';
	return len;
}

/*
 * A name derived from a key by a suffix, as Redisson's suffixName makes
 * it: {key}<suffix>, or key<suffix> when the key has a brace already (a
 * semaphore's permits: {key}:timeout).  buf has room for keylen plus the
 * suffix and 3 bytes.
 */
int
rlock_suffixed_name(char *buf, const char *key, int keylen, const char *suffix)
{
	int			len = names_hash_tagged(buf, key, keylen);

	strcpy(buf + len, suffix);
	return len + strlen(suffix);
}

/*
 * The kinds' names, as rlock_locks shows them (shared.h's list)
 */
#define RLOCK_KIND_NAME(NUMBER, name) #name,
const char *const rlock_kind_names[RLOCK_NKINDS] = {
	RLOCK_KIND_LIST(RLOCK_KIND_NAME)
	RLOCK_TEST_KIND_LIST(RLOCK_KIND_NAME)
};

/*
 * The unlock channel of a key: redisson_lock__channel:{key}.
 */
int
rlock_channel_name(char *buf, const char *key, int keylen)
{
	return rlock_derived_name(buf, RLOCK_CHANNEL_PREFIX, key, keylen);
}

/*
 * The fencing token counter of a key: redisson_lock_token:{key}.
 */
int
rlock_token_name(char *buf, const char *key, int keylen)
{
	return rlock_derived_name(buf, RLOCK_TOKEN_PREFIX, key, keylen);
}

/*
 * The mark of a lock freed for other clients (worker/waiters.c):
 * rlock_yield:{key}, for a moment rlock's acquires do not take the free
 * lock, and Redisson's, which do not read it, may.
 */
int
rlock_yield_name(char *buf, const char *key, int keylen)
{
	return rlock_derived_name(buf, RLOCK_YIELD_PREFIX, key, keylen);
}

/*
 * Write the hash field of an owner into buf, which must have room for
 * RLOCK_OWNER_MAXLEN bytes.  Returns the length.
 */
int
rlock_owner_name(char *buf, uint64 owner_id)
{
	return snprintf(buf, RLOCK_OWNER_MAXLEN, "%s:" UINT64_FORMAT,
					rlock_shared->uuid, owner_id);
}

/*
 * Hash and compare functions for dynahash tables keyed by RlockKeyRef.
 */
static uint32
keyref_hash(const void *key, Size keysize)
{
	const RlockKeyRef *k = (const RlockKeyRef *) key;

	return hash_bytes((const unsigned char *) k->data, k->len);
}

static int
keyref_match(const void *key1, const void *key2, Size keysize)
{
	const RlockKeyRef *a = (const RlockKeyRef *) key1;
	const RlockKeyRef *b = (const RlockKeyRef *) key2;

	if (a->len != b->len)
		return 1;
	return memcmp(a->data, b->data, a->len);
}

/*
 * A process-local hash table in cxt whose entries (of entrysize bytes)
 * start with an RlockKeyRef; the entry owns the bytes its key points to.
 */
HTAB *
rlock_keyref_table(const char *name, Size entrysize, MemoryContext cxt)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(RlockKeyRef);
	ctl.entrysize = entrysize;
	ctl.hash = keyref_hash;
	ctl.match = keyref_match;
	ctl.hcxt = cxt;
	return hash_create(name, 64, &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

/*
 * A key no conversion can show in the database encoding: ASCII as it is
 * (a backslash doubled), every other character as \uXXXX or \UXXXXXXXX.
 * The key is valid UTF-8 (checked when it was given).
 */
static char *
rlock_escaped_key(const char *key, int keylen)
{
	StringInfoData buf;
	int			i = 0;

	initStringInfo(&buf);
	while (i < keylen)
	{
		const unsigned char *c = (const unsigned char *) key + i;
		int			len = pg_utf_mblen(c);

		if (len < 1 || i + len > keylen)
			len = 1;			/* cannot happen: the key was checked */
		if (*c == '\\')
			appendStringInfoString(&buf, "\\\\");
		else if (*c >= 0x20 && *c < 0x7f)
			appendStringInfoChar(&buf, (char) *c);
		else
		{
			pg_wchar	u = (len > 1 || *c < 0x80) ? utf8_to_unicode(c) : *c;

			appendStringInfo(&buf, u > 0xffff ? "\\U%08X" : "\\u%04X",
							 (unsigned int) u);
		}
		i += len;
	}
	return buf.data;
}

/*
 * A Redis key as the SQL caller wrote it, for messages and views: without
 * the first prefixlen bytes (the caller's rlock.key_prefix), in the
 * database encoding.  Keys come from sessions of
 * every database; one that this database's encoding cannot show (a
 * Japanese key seen from a LATIN1 database) is shown escaped rather than
 * fail the view.
 */
char *
rlock_sql_key(const char *key, int keylen, int prefixlen)
{
	int			encoding = GetDatabaseEncoding();
	Oid			proc;
	char	   *out;
	int			i;

	if (prefixlen > 0 && keylen >= prefixlen)
	{
		key += prefixlen;
		keylen -= prefixlen;
	}
	for (i = 0; i < keylen && !IS_HIGHBIT_SET(key[i]); i++)
		;
	if (i == keylen || encoding == PG_UTF8 || encoding == PG_SQL_ASCII)
		return pnstrdup(key, keylen);	/* the same bytes here */

	proc = FindDefaultConversionProc(PG_UTF8, encoding);
	if (OidIsValid(proc))
	{
		int			size = keylen * MAX_CONVERSION_GROWTH + 1;

		out = palloc(size);
		if (pg_do_encoding_conversion_buf(proc, PG_UTF8, encoding,
										  (unsigned char *) key, keylen,
										  (unsigned char *) out, size,
										  true) == keylen)
			return out;
		pfree(out);
	}
	return rlock_escaped_key(key, keylen);
}

/*
 * Text Redis sent that is not a key rlock wrote (an owner field, a name
 * from another instance's registry), for SQL: in the database encoding if
 * it is valid UTF-8 that the encoding can show, else escaped.
 */
char *
rlock_sql_text(const char *s, int len)
{
	if (!pg_verify_mbstr(PG_UTF8, s, len, true))
		return rlock_escaped_key(s, len);
	return rlock_sql_key(s, len, 0);
}

/*
 * The name other instances show for this one: rlock.instance_name, else
 * cluster_name, else the host name and port.
 */
void
rlock_instance_display_name(char *buf, int buflen)
{
	char		host[256];

	if (rlock_instance_name != NULL && rlock_instance_name[0] != '\0')
		strlcpy(buf, rlock_instance_name, buflen);
	else if (cluster_name != NULL && cluster_name[0] != '\0')
		strlcpy(buf, cluster_name, buflen);
	else
	{
		if (gethostname(host, sizeof(host)) != 0)
			strlcpy(host, "localhost", sizeof(host));
		host[sizeof(host) - 1] = '\0';
		snprintf(buf, buflen, "%s:%d", host, PostPortNumber);
	}
}

/*
 * Do the lock's unlock channel and fencing token counter hash to the
 * lock's own slot?  They do for every name but those with a "}" and no
 * hash tag, a "{" and no hash tag, or no bytes at all: a script over the
 * lock and its counter would then span two slots (CROSSSLOT), and the
 * channel would belong to another shard.  The counter is named like the
 * channel, with another prefix, so the channel decides for both.
 */
bool
rlock_name_fits_slot(const char *key, int keylen)
{
	char	   *channel = palloc(RLOCK_CHANNEL_MAXLEN(keylen));
	int			len = rlock_channel_name(channel, key, keylen);
	bool		fits = rlock_key_slot(channel, len) == rlock_key_slot(key, keylen);

	pfree(channel);
	return fits;
}
