/*-------------------------------------------------------------------------
 *
 * names.c
 *		Redis names derived from a lock key, as Redisson derives them.
 *
 * A lock named NAME lives in the hash at key NAME.  Its unlock channel is
 * "redisson_lock__channel:{NAME}", where the braces are left out when NAME
 * already contains "{" (Redisson keeps the user's own cluster hash tag).
 * The hash field of a holder is "<uuid>:<n>": the instance's uuid and a
 * number unique to one backend session.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/names.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"

#include "rlock.h"

/*
 * Write the unlock channel of a key into buf, which must have room for
 * RLOCK_CHANNEL_MAXLEN(keylen) bytes.  Returns the length.
 */
int
rlock_channel_name(char *buf, const char *key, int keylen)
{
	int			len = strlen(RLOCK_CHANNEL_PREFIX);
	bool		braces = (memchr(key, '{', keylen) == NULL);

	memcpy(buf, RLOCK_CHANNEL_PREFIX, len);
	if (braces)
		buf[len++] = '{';
	memcpy(buf + len, key, keylen);
	len += keylen;
	if (braces)
		buf[len++] = '}';
	buf[len] = '\0';
	return len;
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
uint32
rlock_keyref_hash(const void *key, Size keysize)
{
	const RlockKeyRef *k = (const RlockKeyRef *) key;

	return hash_bytes((const unsigned char *) k->data, k->len);
}

int
rlock_keyref_match(const void *key1, const void *key2, Size keysize)
{
	const RlockKeyRef *a = (const RlockKeyRef *) key1;
	const RlockKeyRef *b = (const RlockKeyRef *) key2;

	if (a->len != b->len)
		return 1;
	return memcmp(a->data, b->data, a->len);
}
