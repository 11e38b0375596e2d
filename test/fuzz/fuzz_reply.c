/*-------------------------------------------------------------------------
 *
 * fuzz_reply.c
 *		A libFuzzer target over rlock's reading of replies: the reader
 *		with its limits, the shapes, the classes and the pub/sub frames
 *		of src/redis/reply.c, on any bytes.
 *
 * The first byte of an input says how the rest reaches the reader, as a
 * socket would cut it: all at once (0), one byte at a time (1), or in
 * chunks of that many bytes.  After each chunk every complete reply is
 * taken, looked at the way the worker looks at replies (every shape,
 * the class, the pub/sub frame, its description, a cluster's slot map),
 * walked to its last byte, and freed.  A fault ends the input, as it ends a
 * connection, and must leave the reader holding nothing.
 *
 * reply.c needs nothing of the server but memory contexts; shims.c
 * makes them of malloc and free, so AddressSanitizer sees every reply
 * object and LeakSanitizer every one not freed.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/fuzz/fuzz_reply.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "redis/redis_int.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The memory context of the readers (shims.c's, made of malloc) */
static MemoryContext fuzz_context = NULL;

/* Touch every byte of a reply, so that a bad length shows */
static unsigned int
fuzz_walk(const RlockReply *reply, int depth)
{
	unsigned int sum = (unsigned int) reply->type;
	int			i;

	if (depth > RLOCK_REPLY_MAX_DEPTH + 1)
		abort();				/* the depth limit did not hold */
	switch (reply->type)
	{
		case RLOCK_REPLY_STRING:
		case RLOCK_REPLY_STATUS:
		case RLOCK_REPLY_ERROR:
			if (reply->len < 0 || reply->len > RLOCK_REPLY_MAX_STRING ||
				reply->str[reply->len] != '\0')
				abort();
			for (i = 0; i < reply->len; i++)
				sum += (unsigned char) reply->str[i];
			break;
		case RLOCK_REPLY_ARRAY:
			if (reply->elements < 0 ||
				reply->elements > RLOCK_REPLY_MAX_ELEMENTS)
				abort();
			for (i = 0; i < reply->elements; i++)
				sum += fuzz_walk(reply->element[i], depth + 1);
			break;
		case RLOCK_REPLY_INTEGER:
			sum += (unsigned int) reply->integer;
			break;
		case RLOCK_REPLY_NIL:
			break;
	}
	return sum;
}

/*
 * Read it as a cluster's slot map, both ways: a refusal is fine, a map
 * that names a primary it does not have is not.
 */
static void
fuzz_cluster_map(const RlockReply *reply)
{
	static RlockClusterMap map;
	char		error[256];
	int			pass;

	for (pass = 0; pass < 3; pass++)
	{
		bool		ok;
		int			slot;

		if (pass == 2)
			ok = rlock_cluster_map_from_slots(reply, "seed", &map, error,
											  sizeof(error));
		else
			ok = rlock_cluster_map_from_shards(reply, pass == 1, "seed", &map,
											   error, sizeof(error));
		if (!ok)
			continue;
		if (map.nnodes < 0 || map.nnodes > RLOCK_CLUSTER_MAX_NODES)
			abort();
		for (slot = 0; slot < RLOCK_CLUSTER_SLOTS; slot++)
			if (map.owner[slot] < -1 || map.owner[slot] >= map.nnodes)
				abort();
	}
}

/* Look at a reply the way the worker does */
static void
fuzz_look(const RlockReply *reply)
{
	static const RlockShape shapes[] = {
		RLOCK_SHAPE_OK, RLOCK_SHAPE_PONG, RLOCK_SHAPE_INTEGER,
		RLOCK_SHAPE_INTEGER_OR_NIL, RLOCK_SHAPE_INTEGERS, RLOCK_SHAPE_STRING,
		RLOCK_SHAPE_ARRAY, RLOCK_SHAPE_SUBSCRIBE, RLOCK_SHAPE_UNSUBSCRIBE
	};
	volatile unsigned int sink;
	char		what[64];
	size_t		i;

	for (i = 0; i < lengthof(shapes); i++)
	{
		(void) rlock_reply_fits(reply, shapes[i], 0);
		(void) rlock_reply_fits(reply, shapes[i], 2);
	}
	if (reply->type == RLOCK_REPLY_ARRAY &&
		rlock_reply_fits(reply, RLOCK_SHAPE_INTEGERS, reply->elements))
	{
		for (i = 0; i < (size_t) reply->elements; i++)
			if (reply->element[i]->type != RLOCK_REPLY_INTEGER)
				abort();		/* a fit that does not fit */
	}
	(void) rlock_reply_classify(reply);
	if (rlock_reply_pubsub_frame(reply) == RLOCK_FRAME_MESSAGE &&
		(reply->element[1]->type != RLOCK_REPLY_STRING ||
		 reply->element[2]->type != RLOCK_REPLY_STRING))
		abort();				/* the worker reads both as strings */
	rlock_reply_describe(reply, what, sizeof(what));
	sink = fuzz_walk(reply, 1);
	(void) sink;
	fuzz_cluster_map(reply);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	RlockReader *reader;
	size_t		chunk;
	size_t		pos = 1;
	char		fault[160];

	if (size < 1)
		return 0;
	chunk = data[0] == 0 ? size : data[0];
	if (fuzz_context == NULL)
		fuzz_context = AllocSetContextCreate(NULL, "fuzz",
											 ALLOCSET_DEFAULT_SIZES);
	reader = rlock_reader_create(fuzz_context);
	if (reader == NULL)
		return 0;

	while (pos < size)
	{
		size_t		n = Min(chunk, size - pos);
		RlockReply *reply;
		int			rc;

		if (!rlock_reader_feed(reader, (const char *) data + pos, n))
			break;
		pos += n;
		while ((rc = rlock_reader_next(reader, &reply)) > 0)
		{
			fuzz_look(reply);
			rlock_reply_free(reply);
		}
		if (rc < 0)
			break;
		if (rlock_reader_pending(reader) > RLOCK_REPLY_MAX_PENDING)
			abort();			/* next() should have refused it */
	}
	if (reader->fault != RLOCK_READER_OK &&
		(reader->hiredis != NULL || reader->held != 0))
		abort();				/* a fault must give back what was held */
	rlock_reader_describe_fault(reader, fault, sizeof(fault));
	rlock_reader_free(reader);
	return 0;
}
