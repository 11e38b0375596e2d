/*-------------------------------------------------------------------------
 *
 * reply_budget.c
 *		Run the reply readers of src/redis/reply.c as the worker runs
 *		them for many connections at once, and print what the budget
 *		shared by all readers did.  Test 060 reads the output.
 *
 * Six liars are fed, 64 kB at a time as sockets would deliver them, "*8"
 * and then seven bulk strings of 1,000,000 bytes: an array that never
 * ends, each below the limits of one connection, 42 MB in all.  The first
 * three are fed one after the other, the last three in turns, so that
 * the budget meets both a reader that holds more than the one growing
 * and a growing reader that holds the most.  After each piece, an honest
 * reader gets a small complete reply and has it taken, as a connection
 * with a waiting command would.  Readers whose reader faults are fed no
 * more, as their connection would be dropped.  Printed, one "name value"
 * a line:
 *
 *	budget		RLOCK_REPLY_BUDGET
 *	max_held	the most all readers held together after any call
 *	liars_dropped		liars whose reader faulted for the budget
 *	dropped_growing		... while they were being fed
 *	dropped_by_other	... while another reader was being fed
 *	held_after_drop		the most a faulted reader still held
 *	other_faults	faults for another cause than the budget
 *	honest_replies	complete replies the honest reader handed over
 *	turns	pieces fed to liars (the honest reader had as many replies)
 *	honest_fault	1 if the honest reader faulted
 *	fault	the description of the first budget fault
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/unit/reply_budget.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>

#include "utils/memutils.h"

#include "redis/redis_int.h"

#define NLIARS		6
#define NBULKS		7
#define BULK_SIZE	1000000
#define CHUNK		(64 * 1024)

/* "*8", then NBULKS bulk strings of BULK_SIZE bytes */
static char *
make_lie(size_t *len)
{
	char		head[32];
	size_t		headlen = snprintf(head, sizeof(head), "$%d\r\n", BULK_SIZE);
	size_t		bulk = headlen + BULK_SIZE + 2;
	char	   *lie = malloc(4 + NBULKS * bulk);
	char	   *p = lie;
	int			i;

	memcpy(p, "*8\r\n", 4);
	p += 4;
	for (i = 0; i < NBULKS; i++)
	{
		memcpy(p, head, headlen);
		memset(p + headlen, 'x', BULK_SIZE);
		memcpy(p + headlen + BULK_SIZE, "\r\n", 2);
		p += bulk;
	}
	*len = p - lie;
	return lie;
}

/* Feed a reader and take its complete replies: false on a fault */
static bool
feed(RlockReader *reader, const char *buf, size_t len, int *replies)
{
	RlockReply *reply;
	int			rc;

	if (!rlock_reader_feed(reader, buf, len))
		return false;
	while ((rc = rlock_reader_next(reader, &reply)) > 0)
	{
		(*replies)++;
		rlock_reply_free(reply);
	}
	return rc == 0;
}

static RlockReader *liar[NLIARS];
static bool dropped[NLIARS];
static RlockReader *honest;
static char *lie;
static size_t lie_len;

static Size max_held = 0;
static Size held_after_drop = 0;
static int	dropped_growing = 0;
static int	dropped_by_other = 0;
static int	other_faults = 0;
static int	honest_replies = 0;
static int	turns = 0;
static bool honest_fault = false;
static char fault[256] = "";

/*
 * One turn of liar i, at byte "pos" of its lie, then a small reply for
 * the honest reader; note what faulted.
 */
static void
turn(int i, size_t pos)
{
	static const char small[] = "*2\r\n:1\r\n:0\r\n";
	int			replies = 0;
	Size		held;
	int			j;

	if (dropped[i] || pos >= lie_len)
		return;
	turns++;
	(void) feed(liar[i], lie + pos, Min(CHUNK, lie_len - pos), &replies);
	if (!honest_fault &&
		!feed(honest, small, sizeof(small) - 1, &honest_replies))
		honest_fault = true;

	held = honest->held;
	for (j = 0; j < NLIARS; j++)
		held += liar[j]->held;
	max_held = Max(max_held, held);
	for (j = 0; j < NLIARS; j++)
	{
		if (dropped[j] || liar[j]->fault == RLOCK_READER_OK)
			continue;
		dropped[j] = true;
		if (liar[j]->fault != RLOCK_READER_BUDGET)
			other_faults++;
		else if (j == i)
			dropped_growing++;
		else
			dropped_by_other++;
		if (fault[0] == '\0')
			rlock_reader_describe_fault(liar[j], fault, sizeof(fault));
		held_after_drop = Max(held_after_drop, liar[j]->held);
	}
}

int
main(void)
{
	MemoryContext cxt = AllocSetContextCreate(NULL, "unit",
											  ALLOCSET_DEFAULT_SIZES);
	size_t		pos;
	int			i;

	lie = make_lie(&lie_len);
	honest = rlock_reader_create(cxt);
	for (i = 0; i < NLIARS; i++)
	{
		liar[i] = rlock_reader_create(cxt);
		dropped[i] = false;
	}

	/* the first half of the liars one after the other, the rest in turns */
	for (i = 0; i < NLIARS / 2; i++)
		for (pos = 0; pos < lie_len; pos += CHUNK)
			turn(i, pos);
	for (pos = 0; pos < lie_len; pos += CHUNK)
		for (i = NLIARS / 2; i < NLIARS; i++)
			turn(i, pos);

	printf("budget %d\n", RLOCK_REPLY_BUDGET);
	printf("max_held %zu\n", (size_t) max_held);
	printf("liars_dropped %d\n", dropped_growing + dropped_by_other);
	printf("dropped_growing %d\n", dropped_growing);
	printf("dropped_by_other %d\n", dropped_by_other);
	printf("held_after_drop %zu\n", (size_t) held_after_drop);
	printf("other_faults %d\n", other_faults);
	printf("honest_replies %d\n", honest_replies);
	printf("turns %d\n", turns);
	printf("honest_fault %d\n", honest_fault ? 1 : 0);
	printf("fault %s\n", fault);

	for (i = 0; i < NLIARS; i++)
		rlock_reader_free(liar[i]);
	rlock_reader_free(honest);
	MemoryContextDelete(cxt);
	free(lie);
	return 0;
}
