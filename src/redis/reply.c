/*-------------------------------------------------------------------------
 *
 * reply.c
 *		Reading replies from Redis, within limits, and telling what they
 *		are.
 *
 * Everything Redis sends is untrusted: a broken server, a proxy or anyone
 * on the path may send any bytes.  hiredis's reader parses RESP2; it calls
 * back into this file to build each value, and this file refuses, before
 * allocating anything, a string longer than RLOCK_REPLY_MAX_STRING, an
 * array of more than RLOCK_REPLY_MAX_ELEMENTS elements, arrays nested
 * deeper than RLOCK_REPLY_MAX_DEPTH and a reply that would take more than
 * RLOCK_REPLY_MAX_BYTES of memory.  A refusal makes the reader fail for
 * good; the connection is then dropped.  hiredis waits for a bulk string
 * to be complete before it calls back, so the connection also bounds the
 * bytes buffered without a complete reply (rlock_reader_pending()).
 *
 * The callbacks run inside hiredis: they never raise an error (memory is
 * allocated with MCXT_ALLOC_NO_OOM) and keep no state but the reader's.
 *
 * This file uses nothing of the server but palloc and pfree, so that the
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

#include "redis/redis_int.h"

/*
 * Account for "size" more bytes of the reply being read; false (and the
 * fault recorded) if that breaks the limit.
 */
static bool
reader_charge(RlockReader *reader, Size size)
{
	if (reader->bytes + size > RLOCK_REPLY_MAX_BYTES)
	{
		reader->fault = RLOCK_READER_BYTES;
		reader->fault_value = (int64) (reader->bytes + size);
		return false;
	}
	reader->bytes += size;
	return true;
}

/*
 * Allocate and charge a value; NULL when refused.
 */
static RlockReply *
reader_alloc(RlockReader *reader, Size extra)
{
	RlockReply *reply;

	if (!reader_charge(reader, sizeof(RlockReply) + extra))
		return NULL;
	reply = MemoryContextAllocExtended(reader->cxt,
									   sizeof(RlockReply) + extra,
									   MCXT_ALLOC_NO_OOM | MCXT_ALLOC_ZERO);
	if (reply == NULL)
		reader->fault = RLOCK_READER_MEMORY;
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

static void *
reader_create_string(const redisReadTask *task, char *str, size_t len)
{
	RlockReader *reader = (RlockReader *) task->privdata;
	RlockReply *reply;

	if (len > RLOCK_REPLY_MAX_STRING)
	{
		reader->fault = RLOCK_READER_STRING;
		reader->fault_value = (int64) len;
		return NULL;
	}
	reply = reader_alloc(reader, len + 1);
	if (reply == NULL)
		return NULL;
	switch (task->type)
	{
		case REDIS_REPLY_ERROR:
			reply->type = RLOCK_REPLY_ERROR;
			break;
		case REDIS_REPLY_STATUS:
			reply->type = RLOCK_REPLY_STATUS;
			break;
		default:
			reply->type = RLOCK_REPLY_STRING;
			break;
	}
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
reader_create_array(const redisReadTask *task, int elements)
{
	RlockReader *reader = (RlockReader *) task->privdata;
	RlockReply *reply;

	if (elements < 0 || elements > RLOCK_REPLY_MAX_ELEMENTS)
	{
		reader->fault = RLOCK_READER_ELEMENTS;
		reader->fault_value = elements;
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

static void *
reader_create_nil(const redisReadTask *task)
{
	RlockReader *reader = (RlockReader *) task->privdata;
	RlockReply *reply = reader_alloc(reader, 0);

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

static redisReplyObjectFunctions reader_functions = {
	reader_create_string,
	reader_create_array,
	reader_create_integer,
	reader_create_nil,
	reader_free_object
};

/*
 * A reader whose replies are allocated in "cxt".  NULL if hiredis could
 * not allocate its own part.
 */
RlockReader *
rlock_reader_create(MemoryContext cxt)
{
	RlockReader *reader;

	reader = MemoryContextAllocExtended(cxt, sizeof(RlockReader),
										MCXT_ALLOC_NO_OOM | MCXT_ALLOC_ZERO);
	if (reader == NULL)
		return NULL;
	reader->cxt = cxt;
	reader->hiredis = redisReaderCreateWithFunctions(&reader_functions);
	if (reader->hiredis == NULL)
	{
		pfree(reader);
		return NULL;
	}
	reader->hiredis->privdata = reader;
	return reader;
}

void
rlock_reader_free(RlockReader *reader)
{
	if (reader == NULL)
		return;
	redisReaderFree(reader->hiredis);
	pfree(reader);
}

/*
 * Record a fault of hiredis's own, if a callback did not record one.
 */
static void
reader_note_failure(RlockReader *reader)
{
	if (reader->fault != RLOCK_READER_OK)
		return;
	reader->fault = (reader->hiredis->err == REDIS_ERR_PROTOCOL) ?
		RLOCK_READER_PROTOCOL : RLOCK_READER_MEMORY;
	strlcpy(reader->fault_text, reader->hiredis->errstr,
			sizeof(reader->fault_text));
}

/*
 * Hand bytes read from the socket to the reader.  False on a fault.
 */
bool
rlock_reader_feed(RlockReader *reader, const char *buf, size_t len)
{
	if (reader->fault != RLOCK_READER_OK)
		return false;
	if (redisReaderFeed(reader->hiredis, buf, len) != REDIS_OK)
	{
		reader_note_failure(reader);
		return false;
	}
	return true;
}

/*
 * The next complete reply: 1 and *reply set (the caller frees it with
 * rlock_reply_free), 0 when the bytes so far hold none, -1 on a fault
 * (see rlock_reader_describe_fault).  A fault is final.
 */
int
rlock_reader_next(RlockReader *reader, RlockReply **reply)
{
	void	   *obj = NULL;

	*reply = NULL;
	if (reader->fault != RLOCK_READER_OK)
		return -1;
	if (redisReaderGetReply(reader->hiredis, &obj) != REDIS_OK)
	{
		reader_note_failure(reader);
		return -1;
	}
	if (obj == NULL)
	{
		if (rlock_reader_pending(reader) > RLOCK_REPLY_MAX_PENDING)
		{
			reader->fault = RLOCK_READER_PENDING;
			reader->fault_value = (int64) rlock_reader_pending(reader);
			return -1;
		}
		return 0;
	}
	reader->bytes = 0;			/* the next reply starts afresh */
	*reply = (RlockReply *) obj;
	return 1;
}

/*
 * Bytes the reader holds that do not make a complete reply yet.
 */
size_t
rlock_reader_pending(RlockReader *reader)
{
	return reader->hiredis->len - reader->hiredis->pos;
}

/*
 * Refuse more bytes without a complete reply than the limit allows; for
 * callers that do not ask for a reply after every feed.  False (and the
 * fault recorded) if the limit is broken.
 */
bool
rlock_reader_check_pending(RlockReader *reader)
{
	if (reader->fault != RLOCK_READER_OK)
		return false;
	if (rlock_reader_pending(reader) <= RLOCK_REPLY_MAX_PENDING)
		return true;
	reader->fault = RLOCK_READER_PENDING;
	reader->fault_value = (int64) rlock_reader_pending(reader);
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

/*
 * Describe a reply in a few words, for messages: its type and size, never
 * its contents (they may be anything).
 */
void
rlock_reply_describe(const RlockReply *reply, char *buf, size_t size)
{
	switch (reply->type)
	{
		case RLOCK_REPLY_STRING:
			snprintf(buf, size, "a string of %d bytes", reply->len);
			break;
		case RLOCK_REPLY_STATUS:
			snprintf(buf, size, "a status of %d bytes", reply->len);
			break;
		case RLOCK_REPLY_ERROR:
			snprintf(buf, size, "an error");
			break;
		case RLOCK_REPLY_INTEGER:
			snprintf(buf, size, "an integer");
			break;
		case RLOCK_REPLY_NIL:
			snprintf(buf, size, "a nil");
			break;
		case RLOCK_REPLY_ARRAY:
			snprintf(buf, size, "an array of %d elements", reply->elements);
			break;
	}
}

static bool
reply_is_string(const RlockReply *reply, const char *text)
{
	return reply->type == RLOCK_REPLY_STRING &&
		reply->len == (int) strlen(text) &&
		memcmp(reply->str, text, reply->len) == 0;
}

static bool
reply_is_status(const RlockReply *reply, const char *text)
{
	return reply->type == RLOCK_REPLY_STATUS && strcmp(reply->str, text) == 0;
}

/*
 * A subscribe or unsubscribe confirmation: [kind, channel, count].  An
 * unsubscribe from nothing names no channel (nil).
 */
static bool
reply_is_confirmation(const RlockReply *reply, const char *kind,
					  bool nil_channel_ok)
{
	return reply->type == RLOCK_REPLY_ARRAY && reply->elements == 3 &&
		reply_is_string(reply->element[0], kind) &&
		(reply->element[1]->type == RLOCK_REPLY_STRING ||
		 (nil_channel_ok && reply->element[1]->type == RLOCK_REPLY_NIL)) &&
		reply->element[2]->type == RLOCK_REPLY_INTEGER;
}

/*
 * Does a reply fit a command that expects "shape" (n: the number of
 * integers of RLOCK_SHAPE_INTEGERS)?  Errors fit everything.
 */
bool
rlock_reply_fits(const RlockReply *reply, RlockShape shape, int n)
{
	int			i;

	if (reply->type == RLOCK_REPLY_ERROR)
		return true;
	switch (shape)
	{
		case RLOCK_SHAPE_OK:
			return reply_is_status(reply, "OK");
		case RLOCK_SHAPE_PONG:
			return reply_is_status(reply, "PONG");
		case RLOCK_SHAPE_INTEGER:
			return reply->type == RLOCK_REPLY_INTEGER;
		case RLOCK_SHAPE_INTEGER_OR_NIL:
			return reply->type == RLOCK_REPLY_INTEGER ||
				reply->type == RLOCK_REPLY_NIL;
		case RLOCK_SHAPE_INTEGERS:
			if (reply->type != RLOCK_REPLY_ARRAY || reply->elements != n)
				return false;
			for (i = 0; i < n; i++)
			{
				if (reply->element[i]->type != RLOCK_REPLY_INTEGER)
					return false;
			}
			return true;
		case RLOCK_SHAPE_STRING:
			return reply->type == RLOCK_REPLY_STRING;
		case RLOCK_SHAPE_ARRAY:
			return reply->type == RLOCK_REPLY_ARRAY;
		case RLOCK_SHAPE_ARRAY_OR_NIL:
			return reply->type == RLOCK_REPLY_ARRAY ||
				reply->type == RLOCK_REPLY_NIL;
		case RLOCK_SHAPE_SUBSCRIBE:
			return reply_is_confirmation(reply, "subscribe", false);
		case RLOCK_SHAPE_UNSUBSCRIBE:
			return reply_is_confirmation(reply, "unsubscribe", true);
		case RLOCK_SHAPE_SSUBSCRIBE:
			return reply_is_confirmation(reply, "ssubscribe", false);
		case RLOCK_SHAPE_SUNSUBSCRIBE:
			return reply_is_confirmation(reply, "sunsubscribe", true);
	}
	return false;
}

/*
 * Is an error reply one whose code (its first word) is "code"?
 */
static bool
reply_error_code(const RlockReply *reply, const char *code)
{
	size_t		len = strlen(code);

	return strncmp(reply->str, code, len) == 0 &&
		(reply->str[len] == ' ' || reply->str[len] == '\0');
}

/*
 * What an error reply means for the command it answers.
 */
RlockReplyClass
rlock_reply_classify(const RlockReply *reply)
{
	static const char *const transient[] = {
		"BUSY", "LOADING", "OOM", "READONLY", "MASTERDOWN", "TRYAGAIN",
		"CLUSTERDOWN", "NOREPLICAS"
	};
	int			i;

	if (reply->type != RLOCK_REPLY_ERROR)
		return RLOCK_REPLY_FINE;
	if (reply_error_code(reply, "NOSCRIPT"))
		return RLOCK_REPLY_NOSCRIPT;
	if (reply_error_code(reply, "WRONGTYPE"))
		return RLOCK_REPLY_WRONGTYPE;
	for (i = 0; i < lengthof(transient); i++)
	{
		if (reply_error_code(reply, transient[i]))
			return RLOCK_REPLY_TRANSIENT;
	}
	return RLOCK_REPLY_REFUSED;
}

/*
 * On a subscriber connection: is a reply a published message, an answer
 * to the oldest command, or a push no Redis would send us?  rlock
 * subscribes to plain and shard channels, never to patterns, so
 * "message" and "smessage" are the pushes, each [kind, channel,
 * payload], all strings; and "sunsubscribe", which Redis also sends
 * unasked when a shard channel's slot leaves the node.
 */
RlockPubsubFrame
rlock_reply_pubsub_frame(const RlockReply *reply)
{
	if (reply->type != RLOCK_REPLY_ARRAY || reply->elements == 0 ||
		reply->element[0]->type != RLOCK_REPLY_STRING)
		return RLOCK_FRAME_REPLY;
	if (reply_is_string(reply->element[0], "message") ||
		reply_is_string(reply->element[0], "smessage"))
	{
		if (reply->elements == 3 &&
			reply->element[1]->type == RLOCK_REPLY_STRING &&
			reply->element[2]->type == RLOCK_REPLY_STRING)
			return RLOCK_FRAME_MESSAGE;
		return RLOCK_FRAME_MALFORMED;
	}
	if (reply_is_string(reply->element[0], "pmessage"))
		return RLOCK_FRAME_MALFORMED;
	if (reply_is_string(reply->element[0], "sunsubscribe"))
	{
		/* a confirmation, or Redis's own when the slot moved: the
		 * connection tells them apart by its commands */
		if (reply_is_confirmation(reply, "sunsubscribe", false))
			return RLOCK_FRAME_SUNSUBSCRIBE;
		return RLOCK_FRAME_MALFORMED;
	}
	return RLOCK_FRAME_REPLY;
}
