/*-------------------------------------------------------------------------
 *
 * cluster_map.c
 *		Read one reply to CLUSTER SHARDS or CLUSTER SLOTS, as Redis sends
 *		it, on standard input, and print the slot map src/redis/cluster.c
 *		makes of it: "ok <primaries>", then a line "<first>-<last>
 *		<host>:<port> <id>" per run of slots with one owner; or "refused:
 *		<reason>", or "unreadable: <fault>".  Test 041 feeds it what a
 *		real cluster answers, and replies made to be wrong.
 *
 *		cluster_map shards|slots tls(0|1) seed-host
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/unit/cluster_map.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>

#include "utils/memutils.h"

#include "redis/redis_int.h"

/* The memory context of the readers (shims.c's, made of malloc) */
static MemoryContext unit_context = NULL;

static RlockClusterMap map;
static bool serving[RLOCK_CLUSTER_MAX_NODES];

int
main(int argc, char **argv)
{
	RlockReader *reader;
	RlockReply *reply = NULL;
	char		buf[65536];
	size_t		n;
	char		error[256];
	bool		ok;
	int			rc = 0;
	int			slot;
	int			nserving = 0;
	int			i;

	if (argc != 4)
	{
		fprintf(stderr, "usage: cluster_map shards|slots 0|1 seed-host\n");
		return 2;
	}
	unit_context = AllocSetContextCreate(NULL, "unit", ALLOCSET_DEFAULT_SIZES);
	reader = rlock_reader_create(unit_context);
	while (rc == 0 && (n = fread(buf, 1, sizeof(buf), stdin)) > 0)
	{
		if (!rlock_reader_feed(reader, buf, n))
			rc = -1;
		else
			rc = rlock_reader_next(reader, &reply);
	}
	if (rc <= 0)
	{
		rlock_reader_describe_fault(reader, error, sizeof(error));
		printf("unreadable: %s\n", rc < 0 ? error : "no complete reply");
		rlock_reader_free(reader);
		return 0;
	}
	if (strcmp(argv[1], "shards") == 0)
		ok = rlock_cluster_map_from_shards(reply, strcmp(argv[2], "1") == 0,
										   argv[3], &map, error,
										   sizeof(error));
	else
		ok = rlock_cluster_map_from_slots(reply, argv[3], &map, error,
										  sizeof(error));
	rlock_reply_free(reply);
	rlock_reader_free(reader);
	if (!ok)
	{
		printf("refused: %s\n", error);
		return 0;
	}
	for (slot = 0; slot < RLOCK_CLUSTER_SLOTS; slot++)
	{
		if (map.owner[slot] >= 0)
			serving[map.owner[slot]] = true;
	}
	for (i = 0; i < map.nnodes; i++)
		nserving += serving[i];
	printf("ok %d\n", nserving);
	for (slot = 0; slot < RLOCK_CLUSTER_SLOTS;)
	{
		int			owner = map.owner[slot];
		int			last = slot;

		while (last + 1 < RLOCK_CLUSTER_SLOTS && map.owner[last + 1] == owner)
			last++;
		if (owner >= 0)
			printf("%d-%d %s:%d %s\n", slot, last, map.node[owner].host,
				   map.node[owner].port, map.node[owner].id);
		slot = last + 1;
	}
	/* primaries that serve no slot yet, in the order of the reply */
	for (i = 0; i < map.nnodes; i++)
	{
		if (!serving[i])
			printf("none %s:%d %s\n", map.node[i].host, map.node[i].port,
				   map.node[i].id);
	}
	return 0;
}
