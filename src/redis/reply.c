/*-------------------------------------------------------------------------
 *
 * reply.c
 *		Reading replies from Redis, within limits.  What a reply read is
 *		(its shape, its class, a pub/sub frame) is told by shape.c.
 *
 * Everything Redis sends is untrusted: a broken server, a proxy or anyone
 * on the path may send any bytes.  hiredis's reader parses RESP (0.14
 * knows RESP2 only; 1.x also RESP3, whose types, its null included, rlock
 * never asks for and refuses here as a protocol error, the way 0.14
 * refuses them); it calls back into this file to build each value, and
 * this file refuses, before allocating anything, a string longer than
 * RLOCK_REPLY_MAX_STRING, an array of more than RLOCK_REPLY_MAX_ELEMENTS
 * elements, arrays nested deeper than RLOCK_REPLY_MAX_DEPTH and a reply
 * that would take more than RLOCK_REPLY_MAX_BYTES of memory.  hiredis
 * waits for a bulk string to be complete before it calls back, so the
 * reader also bounds the bytes buffered without a complete reply
 * (RLOCK_REPLY_MAX_PENDING).
 *
 * Those limits are per connection; the worker has many connections (in a
 * Redis Cluster, three per primary).  All readers of the process share
 * one budget, RLOCK_REPLY_BUDGET, charged with what the allocator really
 * holds for them, not what the protocol announces: the memory context of
 * each reader's replies (its blocks, as AllocSet took them from malloc)
 * and hiredis's buffer (an sds string, which grows greedily and is given
 * back here when it holds far more than the bytes still to parse).  A
 * reader's replies live in a context of their own, reset once the reply
 * was handed over and the caller asks for more, so an idle reader holds
 * next to nothing.  Before a reader takes more, room is made: while the
 * total would pass the budget, the reader holding the most is faulted
 * (RLOCK_READER_BUDGET) and gives back everything at once; its connection
 * is dropped the next time the connection layer looks (conn.c).  The
 * reader that grows is refused only when it holds the most itself, so a
 * connection with small honest replies is not the one a liar's large
 * ones push out.
 *
 * A fault is final, and a faulted reader holds nothing but its keeper
 * block: hiredis's reader and everything read are freed when the fault
 * is found.
 *
 * The callbacks run inside hiredis: they never raise an error (memory is
 * allocated with MCXT_ALLOC_NO_OOM) and keep no state but the readers'.
 *
 * This file uses nothing of the server but memory contexts, so that the
 * fuzzing target in test/fuzz can build it on its own.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/reply.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "utils/memutils.h"

#include "redis/redis_int.h"

/*
 * What differs between the hiredis majors rlock builds against (Debian 12
 * has 0.14, Debian 13 1.2): 1.x counts an array's elements in a size_t
 * and calls back for RESP3's types, which 0.14 refuses itself.
 */
#if HIREDIS_MAJOR >= 1
#define RLOCK_HIREDIS_RESP3		1
typedef size_t reader_count;
#else
typedef int reader_count;
#endif

/*
 * The context of a reader's replies has small blocks (ALLOCSET_SMALL_SIZES),
 * so that a value larger than a kilobyte gets a block of its own (given
 * back to malloc when freed) and a small one costs at most one new block
 * of this size.
 */
#define RLOCK_REPLY_BLOCK			ALLOCSET_SMALL_MAXSIZE

/* What AllocSet adds to a value with a block of its own, at most */
#define RLOCK_REPLY_OVERHEAD		128

/* hiredis's buffer is kept as it is up to this much more than the bytes
 * it still has to parse (hiredis's own REDIS_READER_MAX_BUF) */
#define RLOCK_READER_KEEP			(16 * 1024)

/* Every reader of the process, and the memory they hold together */
static dlist_head readers = DLIST_STATIC_INIT(readers);
static Size readers_held = 0;

/*
 * Charge a reader with what it holds now: its replies' context, as
 * allocated from malloc, and hiredis's buffer.
 */
static void
reader_recount(RlockReader *reader)
{
	Size		now = MemoryContextMemAllocated(reader->cxt, false);

	if (reader->hiredis != NULL && reader->hiredis->buf != NULL)
		now += sdsAllocSize(reader->hiredis->buf);
	Assert(readers_held >= reader->held);
	readers_held = readers_held - reader->held + now;
	reader->held = now;
}

/*
 * A fault was found outside hiredis's calls: give back everything the
 * reader holds.  hiredis's reader goes too (a fault is final); a reply
 * being read is in the context, freed with it.
 */
static void
reader_release(RlockReader *reader)
{
	Assert(reader->fault != RLOCK_READER_OK);
	if (reader->hiredis != NULL)
	{
		reader->hiredis->reply = NULL;
		redisReaderFree(reader->hiredis);
		reader->hiredis = NULL;
	}
	MemoryContextReset(reader->cxt);
	reader->building = false;
	reader->handed = false;
	reader_recount(reader);
}

/*
 * Record a fault found outside hiredis's calls, and release the reader.
 */
static void
reader_fail(RlockReader *reader, RlockReaderFault fault, int64 value)
{
	reader->fault = fault;
	reader->fault_value = value;
	reader_release(reader);
}

/*
 * Make room under the budget for "more" bytes that "growing" is about to
 * take: while the readers would hold too much, the one holding the most
 * (counting what "growing" is about to take) is faulted.  Another reader
 * is released at once (it is not inside hiredis: only one reader runs at
 * a time); "growing" itself only has the fault recorded, and false is
 * returned: its caller refuses the value, or releases it.
 */
static bool
reader_make_room(RlockReader *growing, Size more)
{
	while (readers_held + more > RLOCK_REPLY_BUDGET)
	{
		RlockReader *largest = NULL;
		dlist_iter	iter;

		dlist_foreach(iter, &readers)
		{
			RlockReader *r = dlist_container(RlockReader, node, iter.cur);

			if (r != growing && r->fault == RLOCK_READER_OK &&
				(largest == NULL || r->held > largest->held))
				largest = r;
		}
		if (largest == NULL || largest->held <= growing->held + more)
		{
			growing->fault = RLOCK_READER_BUDGET;
			growing->fault_value = (int64) (growing->held + more);
			return false;
		}
		reader_fail(largest, RLOCK_READER_BUDGET, (int64) largest->held);
	}
	return true;
}

/*
 * What allocating "size" bytes in a reader's context may add to what the
 * context holds: a block of its own for a large value, at most a new
 * block for a small one.
 */
static Size
reader_alloc_cost(Size size)
{
	return Max(MAXALIGN(size) + RLOCK_REPLY_OVERHEAD, RLOCK_REPLY_BLOCK);
}

/*
 * Allocate and charge a value; NULL when refused.
 */
static RlockReply *
reader_alloc(RlockReader *reader, Size extra)
{
	Size		size = sizeof(RlockReply) + extra;
	Size		cost = reader_alloc_cost(size);
	Size		reply_memory = MemoryContextMemAllocated(reader->cxt, false);
	RlockReply *reply;

	if (reply_memory + cost > RLOCK_REPLY_MAX_BYTES)
	{
		reader->fault = RLOCK_READER_BYTES;
		reader->fault_value = (int64) (reply_memory + cost);
		return NULL;
	}
	if (!reader_make_room(reader, cost))
		return NULL;
	reply = MemoryContextAllocExtended(reader->cxt, size,
									   MCXT_ALLOC_NO_OOM | MCXT_ALLOC_ZERO);
	if (reply == NULL)
	{
		reader->fault = RLOCK_READER_MEMORY;
		return NULL;
	}
	reader->building = true;
	reader_recount(reader);
	return reply;
}

/*
 * Put a new value in its place in the array being read, if any.
 */
static void *
reader_attach(const redisReadTask *task, RlockReply *reply)
{
	if (reply != NULL && task->parent != NULL)
	{
		RlockReply *parent = (RlockReply *) task->parent->obj;

		Assert(parent->type == RLOCK_REPLY_ARRAY);
		Assert(task->idx >= 0 && task->idx < parent->elements);
		parent->element[task->idx] = reply;
	}
	return reply;
}

#ifdef RLOCK_HIREDIS_RESP3
/*
 * The name of a RESP3 type hiredis 1.x calls back for, for messages.
 */
static const char *
reader_resp3_name(int type)
{
	switch (type)
	{
		case REDIS_REPLY_NIL:
			return "a null";
		case REDIS_REPLY_DOUBLE:
			return "a double";
		case REDIS_REPLY_BOOL:
			return "a boolean";
		case REDIS_REPLY_MAP:
			return "a map";
		case REDIS_REPLY_SET:
			return "a set";
		case REDIS_REPLY_PUSH:
			return "a push";
		case REDIS_REPLY_ATTR:
			return "an attribute";
		case REDIS_REPLY_BIGNUM:
			return "a big number";
		case REDIS_REPLY_VERB:
			return "a verbatim string";
	}
	return "a value";
}
#else
/* 0.14 calls back for RESP2's types only */
static const char *
reader_resp3_name(int type)
{
	return "a value";
}
#endif

/*
 * Refuse a value of a RESP3 type: rlock speaks RESP2 and never says HELLO
 * 3, so such a value comes from something that is not the Redis asked.
 * hiredis 0.14 refuses every RESP3 type byte itself; 1.x calls back, and
 * this makes the same bytes a protocol error on either.
 */
static void *
reader_refuse_resp3(const redisReadTask *task)
{
	RlockReader *reader = (RlockReader *) task->privdata;

	reader->fault = RLOCK_READER_PROTOCOL;
	snprintf(reader->fault_text, sizeof(reader->fault_text),
			 "%s (RESP3), where RESP2 was spoken",
			 reader_resp3_name(task->type));
	return NULL;
}

static void *
reader_create_string(const redisReadTask *task, char *str, size_t len)
{
	RlockReader *reader = (RlockReader *) task->privdata;
	RlockReplyType type;
	RlockReply *reply;

	switch (task->type)
	{
		case REDIS_REPLY_ERROR:
			type = RLOCK_REPLY_ERROR;
			break;
		case REDIS_REPLY_STATUS:
			type = RLOCK_REPLY_STATUS;
			break;
		case REDIS_REPLY_STRING:
			type = RLOCK_REPLY_STRING;
			break;
		default:
			/* RESP3's verbatim strings and big numbers */
			return reader_refuse_resp3(task);
	}
	if (len > RLOCK_REPLY_MAX_STRING)
	{
		reader->fault = RLOCK_READER_STRING;
		reader->fault_value = (int64) len;
		return NULL;
	}
	reply = reader_alloc(reader, len + 1);
	if (reply == NULL)
		return NULL;
	reply->type = type;
	reply->str = (char *) (reply + 1);
	memcpy(reply->str, str, len);
	reply->str[len] = '\0';
	reply->len = (int) len;
	return reader_attach(task, reply);
}

/*
 * Depth of the array a task would create: 1 for a reply that is an array.
 */
static int
reader_depth(const redisReadTask *task)
{
	int			depth = 1;

	while ((task = task->parent) != NULL)
		depth++;
	return depth;
}

static void *
reader_create_array(const redisReadTask *task, reader_count elements)
{
	RlockReader *reader = (RlockReader *) task->privdata;
	RlockReply *reply;

	if (task->type != REDIS_REPLY_ARRAY)	/* RESP3's maps, sets, pushes */
		return reader_refuse_resp3(task);
	/* 0.14 passes a negative count on as it came */
	if ((uint64) elements > RLOCK_REPLY_MAX_ELEMENTS)
	{
		reader->fault = RLOCK_READER_ELEMENTS;
		reader->fault_value = (int64) elements;
		return NULL;
	}
	if (reader_depth(task) > RLOCK_REPLY_MAX_DEPTH)
	{
		reader->fault = RLOCK_READER_DEPTH;
		reader->fault_value = reader_depth(task);
		return NULL;
	}
	reply = reader_alloc(reader, sizeof(RlockReply *) * elements);
	if (reply == NULL)
		return NULL;
	reply->type = RLOCK_REPLY_ARRAY;
	reply->elements = elements;
	reply->element = (RlockReply **) (reply + 1);
	return reader_attach(task, reply);
}

static void *
reader_create_integer(const redisReadTask *task, long long value)
{
	RlockReader *reader = (RlockReader *) task->privdata;
	RlockReply *reply = reader_alloc(reader, 0);

	if (reply == NULL)
		return NULL;
	reply->type = RLOCK_REPLY_INTEGER;
	reply->integer = value;
	return reader_attach(task, reply);
}

/*
 * A nil: RESP2's null bulk string ($-1) or null array (*-1).  hiredis 1.x
 * also calls back for RESP3's null (_) and for a map, set or push of
 * count -1, with the task's type saying which: those are refused.
 */
static void *
reader_create_nil(const redisReadTask *task)
{
	RlockReader *reader = (RlockReader *) task->privdata;
	RlockReply *reply;

	if (task->type != REDIS_REPLY_STRING && task->type != REDIS_REPLY_ARRAY)
		return reader_refuse_resp3(task);
	reply = reader_alloc(reader, 0);
	if (reply == NULL)
		return NULL;
	reply->type = RLOCK_REPLY_NIL;
	return reader_attach(task, reply);
}

/*
 * Free a reply and everything in it.  Elements of an array cut short by a
 * refusal are NULL.
 */
void
rlock_reply_free(RlockReply *reply)
{
	int			i;

	if (reply == NULL)
		return;
	if (reply->type == RLOCK_REPLY_ARRAY)
	{
		for (i = 0; i < reply->elements; i++)
			rlock_reply_free(reply->element[i]);
	}
	pfree(reply);
}

static void
reader_free_object(void *obj)
{
	rlock_reply_free((RlockReply *) obj);
}

#ifdef RLOCK_HIREDIS_RESP3
static void *
reader_create_double(const redisReadTask *task, double value, char *str,
					 size_t len)
{
	return reader_refuse_resp3(task);
}

static void *
reader_create_bool(const redisReadTask *task, int value)
{
	return reader_refuse_resp3(task);
}

#endif

/* hiredis 1.x hands a bare type number as the value of a type whose
 * callback is missing: every callback is given */
static redisReplyObjectFunctions reader_functions = {
	.createString = reader_create_string,
	.createArray = reader_create_array,
	.createInteger = reader_create_integer,
	.createNil = reader_create_nil,
#ifdef RLOCK_HIREDIS_RESP3
	.createDouble = reader_create_double,
	.createBool = reader_create_bool,
#endif
	.freeObject = reader_free_object
};

/*
 * A reader whose replies are allocated in a context of its own under
 * "parent".  NULL if hiredis could not allocate its own part.
 */
RlockReader *
rlock_reader_create(MemoryContext parent)
{
	RlockReader *reader;

	reader = MemoryContextAllocExtended(parent, sizeof(RlockReader),
										MCXT_ALLOC_NO_OOM | MCXT_ALLOC_ZERO);
	if (reader == NULL)
		return NULL;
	reader->hiredis = redisReaderCreateWithFunctions(&reader_functions);
	if (reader->hiredis == NULL)
	{
		pfree(reader);
		return NULL;
	}
	reader->cxt = AllocSetContextCreate(parent, "rlock reply",
										ALLOCSET_SMALL_SIZES);
	reader->hiredis->privdata = reader;
	dlist_push_tail(&readers, &reader->node);
	reader_recount(reader);
	return reader;
}

void
rlock_reader_free(RlockReader *reader)
{
	if (reader == NULL)
		return;
	if (reader->hiredis != NULL)
	{
		reader->hiredis->reply = NULL;	/* in the context, deleted below */
		redisReaderFree(reader->hiredis);
	}
	MemoryContextDelete(reader->cxt);
	Assert(readers_held >= reader->held);
	readers_held -= reader->held;
	dlist_delete(&reader->node);
	pfree(reader);
}

/*
 * Record a fault of hiredis's own, if a callback did not record one, and
 * release the reader.  hiredis freed the reply it was reading and its
 * buffer already.
 */
static void
reader_note_failure(RlockReader *reader)
{
	if (reader->fault == RLOCK_READER_OK)
	{
		reader->fault = (reader->hiredis->err == REDIS_ERR_PROTOCOL) ?
			RLOCK_READER_PROTOCOL : RLOCK_READER_MEMORY;
		strlcpy(reader->fault_text, reader->hiredis->errstr,
				sizeof(reader->fault_text));
	}
	reader_release(reader);
}

/*
 * The reply handed over last is done with: free it, with whatever blocks
 * its context took.
 */
static void
reader_forget_reply(RlockReader *reader)
{
	if (!reader->handed)
		return;
	reader->handed = false;
	MemoryContextReset(reader->cxt);
	reader_recount(reader);
}

/*
 * How much hiredis's buffer grows when "len" bytes are added to it, at
 * most: sds doubles what it needs below a megabyte, and adds a megabyte
 * above.
 */
static Size
reader_feed_cost(RlockReader *reader, size_t len)
{
	sds			buf = reader->hiredis->buf;
	size_t		need;

	if (buf == NULL || sdsavail(buf) >= len)
		return 0;
	need = sdslen(buf) + len;
	need = (need < SDS_MAX_PREALLOC) ? 2 * need : need + SDS_MAX_PREALLOC;
	return need + 32 - sdsAllocSize(buf);	/* 32: the sds header, at most */
}

/*
 * Give hiredis's buffer back when it holds far more than the bytes left
 * to parse: sds never shrinks, and hiredis frees it only when it is
 * empty and more bytes come.
 */
static void
reader_trim(RlockReader *reader)
{
	struct redisReader *r = reader->hiredis;
	size_t		pending;
	sds			fresh;

	if (r->buf == NULL)
		return;
	pending = r->len - r->pos;
	if (sdsAllocSize(r->buf) <= RLOCK_READER_KEEP + 2 * pending)
		return;
	fresh = sdsnewlen(r->buf + r->pos, pending);
	if (fresh == NULL)
		return;					/* keep the one there is */
	sdsfree(r->buf);
	r->buf = fresh;
	r->pos = 0;
	r->len = pending;
}

/*
 * Hand bytes read from the socket to the reader.  False on a fault.
 */
bool
rlock_reader_feed(RlockReader *reader, const char *buf, size_t len)
{
	if (reader->fault != RLOCK_READER_OK)
		return false;
	reader_forget_reply(reader);
	if (!reader_make_room(reader, reader_feed_cost(reader, len)))
	{
		reader_release(reader);
		return false;
	}
	if (redisReaderFeed(reader->hiredis, buf, len) != REDIS_OK)
	{
		reader_note_failure(reader);
		return false;
	}
	reader_recount(reader);
	return true;
}

/*
 * The next complete reply: 1 and *reply set, 0 when the bytes so far hold
 * none, -1 on a fault (see rlock_reader_describe_fault).  A fault is
 * final.  The reply lives until the next call on the reader; the caller
 * may free it before with rlock_reply_free.
 */
int
rlock_reader_next(RlockReader *reader, RlockReply **reply)
{
	void	   *obj = NULL;

	*reply = NULL;
	if (reader->fault != RLOCK_READER_OK)
		return -1;
	reader_forget_reply(reader);
	if (redisReaderGetReply(reader->hiredis, &obj) != REDIS_OK)
	{
		reader_note_failure(reader);
		return -1;
	}
	reader_trim(reader);
	reader_recount(reader);
	if (obj == NULL)
		return rlock_reader_check_pending(reader) ? 0 : -1;
	reader->building = false;
	reader->handed = true;
	*reply = (RlockReply *) obj;
	return 1;
}

/*
 * Bytes the reader holds that do not make a complete reply yet.
 */
size_t
rlock_reader_pending(RlockReader *reader)
{
	if (reader->hiredis == NULL)
		return 0;
	return reader->hiredis->len - reader->hiredis->pos;
}

/*
 * Has the reader part of a reply: bytes, or values already built?
 */
bool
rlock_reader_partial(RlockReader *reader)
{
	return reader->building || rlock_reader_pending(reader) > 0;
}

/*
 * Refuse more bytes without a complete reply than the limit allows; for
 * callers that do not ask for a reply after every feed.  False (and the
 * fault recorded) if the limit is broken.
 */
bool
rlock_reader_check_pending(RlockReader *reader)
{
	size_t		pending = rlock_reader_pending(reader);

	if (reader->fault != RLOCK_READER_OK)
		return false;
	if (pending <= RLOCK_REPLY_MAX_PENDING)
		return true;
	reader_fail(reader, RLOCK_READER_PENDING, (int64) pending);
	return false;
}

/*
 * Say why a reader failed, for messages.
 */
void
rlock_reader_describe_fault(RlockReader *reader, char *buf, size_t size)
{
	switch (reader->fault)
	{
		case RLOCK_READER_OK:
			snprintf(buf, size, "no fault");
			break;
		case RLOCK_READER_STRING:
			snprintf(buf, size,
					 "a string of " INT64_FORMAT " bytes, over the limit of %d",
					 reader->fault_value, RLOCK_REPLY_MAX_STRING);
			break;
		case RLOCK_READER_ELEMENTS:
			snprintf(buf, size,
					 "an array of " INT64_FORMAT " elements, over the limit of %d",
					 reader->fault_value, RLOCK_REPLY_MAX_ELEMENTS);
			break;
		case RLOCK_READER_DEPTH:
			snprintf(buf, size,
					 "arrays nested " INT64_FORMAT " deep, over the limit of %d",
					 reader->fault_value, RLOCK_REPLY_MAX_DEPTH);
			break;
		case RLOCK_READER_BYTES:
			snprintf(buf, size,
					 "a reply of more than %d bytes in memory",
					 RLOCK_REPLY_MAX_BYTES);
			break;
		case RLOCK_READER_BUDGET:
			snprintf(buf, size,
					 "the replies of all connections would hold more than %d MiB of memory, and this connection held the most (" INT64_FORMAT " bytes)",
					 RLOCK_REPLY_BUDGET / (1024 * 1024), reader->fault_value);
			break;
		case RLOCK_READER_PENDING:
			snprintf(buf, size,
					 INT64_FORMAT " bytes without a complete reply, over the limit of %d",
					 reader->fault_value, RLOCK_REPLY_MAX_PENDING);
			break;
		case RLOCK_READER_PROTOCOL:
			snprintf(buf, size, "a protocol error (%s)", reader->fault_text);
			break;
		case RLOCK_READER_MEMORY:
			snprintf(buf, size, "out of memory while reading a reply");
			break;
	}
}
