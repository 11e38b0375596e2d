/*-------------------------------------------------------------------------
 *
 * args.c
 *		Building a command: its arguments are added one by one and copied,
 *		with their lengths, so no caller counts bytes; and the command in
 *		RESP, as it goes on the wire.
 *
 * A builder is reused command after command; its memory grows to the
 * largest command built and stays.  A connection appends the RESP of
 * each command it queues to its output buffer (rlock_args_format), the
 * same bytes hiredis's formatter makes: an array of bulk strings.  A Redis
 * Cluster's redirection is followed with the command as it was sent; the
 * key it names is read back from those bytes (rlock_args_wire_key).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/args.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "redis/redis_int.h"

#define ARGS_INITIAL	16

RlockArgs *
rlock_args_create(MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	RlockArgs  *args = palloc0(sizeof(RlockArgs));

	args->maxargs = ARGS_INITIAL;
	args->offsets = palloc(sizeof(int) * args->maxargs);
	args->lens = palloc(sizeof(int) * args->maxargs);
	initStringInfo(&args->buf);
	MemoryContextSwitchTo(old);
	return args;
}

/*
 * Forget the arguments, to build the next command.
 */
void
rlock_args_reset(RlockArgs *args)
{
	args->argc = 0;
	resetStringInfo(&args->buf);
}

/*
 * Add an argument of "len" bytes, copied.
 */
void
rlock_args_add(RlockArgs *args, const char *data, int len)
{
	Assert(len >= 0);
	if (args->argc == args->maxargs)
	{
		args->maxargs *= 2;
		args->offsets = repalloc(args->offsets, sizeof(int) * args->maxargs);
		args->lens = repalloc(args->lens, sizeof(int) * args->maxargs);
	}
	args->offsets[args->argc] = args->buf.len;
	args->lens[args->argc] = len;
	appendBinaryStringInfo(&args->buf, data, len);
	args->argc++;
}

void
rlock_args_cstr(RlockArgs *args, const char *s)
{
	rlock_args_add(args, s, strlen(s));
}

void
rlock_args_int(RlockArgs *args, int64 value)
{
	char		buf[24];

	rlock_args_add(args, buf, snprintf(buf, sizeof(buf), INT64_FORMAT, value));
}

/*
 * Start a script call: EVALSHA <sha> <nkeys>.  The keys, then the other
 * arguments, follow.
 */
void
rlock_args_script(RlockArgs *args, int script, int nkeys)
{
	rlock_args_cstr(args, "EVALSHA");
	rlock_args_add(args, rlock_script_sha(script), RLOCK_SHA1_HEX_LEN);
	rlock_args_int(args, nkeys);
}

/*
 * Append the command to "out" in RESP: "*<argc>", then "$<length>" and
 * the bytes of each argument, every line ending in CRLF.
 */
void
rlock_args_format(const RlockArgs *args, StringInfo out)
{
	char		line[32];
	int			i;

	Assert(args->argc > 0);
	appendBinaryStringInfo(out, line,
						   snprintf(line, sizeof(line), "*%d\r\n", args->argc));
	for (i = 0; i < args->argc; i++)
	{
		Assert(args->offsets[i] >= 0 && args->lens[i] >= 0 &&
			   args->offsets[i] + args->lens[i] <= args->buf.len);
		appendBinaryStringInfo(out, line,
							   snprintf(line, sizeof(line), "$%d\r\n",
										args->lens[i]));
		appendBinaryStringInfo(out, args->buf.data + args->offsets[i],
							   args->lens[i]);
		appendBinaryStringInfo(out, "\r\n", 2);
	}
}

static bool
args_word_is(const char *arg, int len, const char *word)
{
	return len == (int) strlen(word) && pg_strncasecmp(arg, word, len) == 0;
}

/*
 * The key a command names, read back from its RESP as rlock_args_format()
 * wrote it: EVALSHA's first key when it has keys, else the channel of the
 * commands that name one.  False for a command without a key (or bytes
 * that are not such a command).
 */
bool
rlock_args_wire_key(const char *wire, int wirelen, const char **key,
					int *keylen)
{
	const char *p = wire;
	const char *end = wire + wirelen;
	const char *arg[4];
	int			len[4];
	long		nargs;
	int			i;

	if (p == NULL || p >= end || *p != '*')
		return false;
	nargs = strtol(p + 1, NULL, 10);
	p = memchr(p, '\n', end - p);
	for (i = 0; i < 4 && i < nargs && p != NULL; i++)
	{
		const char *q;

		p++;
		if (p >= end || *p != '$')
			return false;
		len[i] = (int) strtol(p + 1, NULL, 10);
		q = memchr(p, '\n', end - p);
		if (q == NULL || len[i] < 0 || len[i] > end - (q + 1))
			return false;
		arg[i] = q + 1;
		p = arg[i] + len[i] + 1;	/* the \n after the \r */
		if (p > end)
			return false;
	}
	if (i >= 4 && args_word_is(arg[0], len[0], "EVALSHA"))
	{
		if (len[2] == 1 && arg[2][0] == '0')
			return false;
		*key = arg[3];
		*keylen = len[3];
		return true;
	}
	if (i >= 2 &&
		(args_word_is(arg[0], len[0], "SUBSCRIBE") ||
		 args_word_is(arg[0], len[0], "UNSUBSCRIBE") ||
		 args_word_is(arg[0], len[0], "SSUBSCRIBE") ||
		 args_word_is(arg[0], len[0], "SUNSUBSCRIBE") ||
		 args_word_is(arg[0], len[0], "PUBLISH") ||
		 args_word_is(arg[0], len[0], "SPUBLISH")))
	{
		*key = arg[1];
		*keylen = len[1];
		return true;
	}
	return false;
}
