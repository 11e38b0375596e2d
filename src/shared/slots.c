/*-------------------------------------------------------------------------
 *
 * slots.c
 *		Redis Cluster hash slots of keys.
 *
 * A key's slot is CRC16 (the XMODEM variant: polynomial 0x1021, initial
 * value 0, bits not reflected) of the key modulo 16384.  When the key has
 * a hash tag, only the tag is hashed: the bytes between the first "{" and
 * the first "}" after it, provided there is at least one.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/slots.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shared/shared.h"

static uint16
crc16_xmodem(const unsigned char *p, size_t len)
{
	uint16		crc = 0;

	while (len-- > 0)
	{
		int			bit;

		crc ^= (uint16) (*p++) << 8;
		for (bit = 0; bit < 8; bit++)
			crc = (crc & 0x8000) ? (uint16) ((crc << 1) ^ 0x1021) :
				(uint16) (crc << 1);
	}
	return crc;
}

/*
 * The hash slot of a key, as Redis computes it.
 */
int
rlock_key_slot(const char *key, int keylen)
{
	const char *open = memchr(key, '{', keylen);

	if (open != NULL)
	{
		const char *tag = open + 1;
		const char *close = memchr(tag, '}', key + keylen - tag);

		if (close != NULL && close > tag)
			return crc16_xmodem((const unsigned char *) tag, close - tag) &
				(RLOCK_CLUSTER_SLOTS - 1);
	}
	return crc16_xmodem((const unsigned char *) key, keylen) &
		(RLOCK_CLUSTER_SLOTS - 1);
}
