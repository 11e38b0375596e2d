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
 * same bytes hiredis's formatter makes: an array of bulk strings.
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
