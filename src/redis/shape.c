/*-------------------------------------------------------------------------
 *
 * shape.c
 *		What a reply read from Redis is: whether it fits the command it
 *		answers, what an error means to the sender, which pushes a
 *		subscriber connection gets, a host or a port it names, and a few
 *		words for messages.
 *
 * Everything here looks at a reply the reader (reply.c) built within its
 * limits, and at nothing else: no connection, no state.  Errors fit
 * every command (Redis may refuse anything); the words for messages give
 * a reply's type and size, never its contents, which may be anything.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/shape.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "redis/redis_int.h"

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

/*
 * The payload of an invalidation: the keys, all strings, or nil for
 * "every key" (a FLUSHALL, or tracking switched off).
 */
static bool
reply_are_keys(const RlockReply *reply)
{
	int			i;

	if (reply->type == RLOCK_REPLY_NIL)
		return true;
	if (reply->type != RLOCK_REPLY_ARRAY)
		return false;
	for (i = 0; i < reply->elements; i++)
	{
		if (reply->element[i]->type != RLOCK_REPLY_STRING)
			return false;
	}
	return true;
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
 * A host as a reply names it (a Sentinel's answer): an address or a host
 * name in a bulk string, nothing that could be anything else.
 */
bool
rlock_reply_is_host(const RlockReply *r)
{
	int			i;

	if (r->type != RLOCK_REPLY_STRING || r->len == 0 || r->len >= NI_MAXHOST)
		return false;
	for (i = 0; i < r->len; i++)
	{
		unsigned char c = (unsigned char) r->str[i];

		if (!(isalnum(c) || c == '.' || c == '-' || c == ':' || c == '_' ||
			  c == '%'))
			return false;
	}
	return true;
}

/*
 * A port as a reply names it, in a bulk string: 1 to 65535, or 0 when it
 * is no port.
 */
int
rlock_reply_port(const RlockReply *r)
{
	int			port = 0;
	int			i;

	if (r->type != RLOCK_REPLY_STRING || r->len == 0 || r->len > 5)
		return 0;
	for (i = 0; i < r->len; i++)
	{
		if (!isdigit((unsigned char) r->str[i]))
			return 0;
		port = port * 10 + (r->str[i] - '0');
	}
	return (port >= 1 && port <= 65535) ? port : 0;
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
		if (reply->elements != 3 ||
			reply->element[1]->type != RLOCK_REPLY_STRING)
			return RLOCK_FRAME_MALFORMED;
		if (reply->element[2]->type == RLOCK_REPLY_STRING)
			return RLOCK_FRAME_MESSAGE;
		if (reply_is_string(reply->element[0], "message") &&
			reply_is_string(reply->element[1], RLOCK_INVALIDATE_CHANNEL) &&
			reply_are_keys(reply->element[2]))
			return RLOCK_FRAME_INVALIDATE;
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
