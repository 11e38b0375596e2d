/*-------------------------------------------------------------------------
 *
 * keyslot.c
 *		Print the Redis Cluster hash slot rlock computes for each key read
 *		on standard input, one key per line, bytes other than printable
 *		ASCII and "%" written as %XX.  Test 040 compares the output with
 *		what Redis answers to CLUSTER KEYSLOT.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/unit/keyslot.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>

#include "shared/shared.h"

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int
main(void)
{
	char		line[8192];
	char		key[8192];

	while (fgets(line, sizeof(line), stdin) != NULL)
	{
		int			len = 0;
		int			i;

		for (i = 0; line[i] != '\0' && line[i] != '\n'; i++)
		{
			if (line[i] == '%' && hexval(line[i + 1]) >= 0 &&
				hexval(line[i + 2]) >= 0)
			{
				key[len++] = (char) (hexval(line[i + 1]) * 16 +
									 hexval(line[i + 2]));
				i += 2;
			}
			else
				key[len++] = line[i];
		}
		printf("%d\n", rlock_key_slot(key, len));
	}
	return 0;
}
