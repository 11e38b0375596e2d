/*-------------------------------------------------------------------------
 *
 * status.c
 *		Why a connection cannot be used, and what rlock_status() shows of
 *		Redis until the topology publishes it.
 *
 * Every file of this folder says why a connection failed the same way:
 * rlock_conn_set_error() words it (and rlock_status() shows it as the
 * latest error); rlock_conn_give_up() also marks the connection failed,
 * to be dropped at the next tick; rlock_conn_violation() does so for what
 * Redis never sends, logging each cause the first time only.  These sit
 * below the transports, so that a transport says why a read failed
 * without calling up into the connection that reads.
 *
 * The record kept here is what the handshake, the Sentinels and the
 * Redis Cluster's map learn for rlock_status(): the server's version and
 * role, the latest error, and whether anything changed since the record
 * was last published (rlock_redis_status_publish, topology.c, copies it
 * into shared memory at the end of the worker's pass).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/status.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "redis/redis_int.h"

/* Something rlock_status() shows changed since it was published */
static bool status_dirty = true;

static char redis_version[32];
static char redis_role[16];
static char last_error[RLOCK_DETAIL_LEN];
static TimestampTz last_error_at = 0;

/* Logged already: ROLE refused (INFO replication asked instead), and the
 * replicas not known at all */
static bool role_refused_logged = false;
static bool replicas_refused_warned = false;

/* Causes of dropped connections logged already */
static bool violation_logged[RLOCK_NVIOLATIONS];

/*---- the record ----*/

/*
 * Remember an error for rlock_status(): a connection failure or an error
 * reply from Redis.
 */
void
rlock_redis_status_error(const char *msg)
{
	strlcpy(last_error, msg, sizeof(last_error));
	last_error_at = GetCurrentTimestamp();
	status_dirty = true;
}

/*
 * The server's version (from INFO) or role (from ROLE) became known; NULL
 * leaves one as it is, "" makes it unknown.
 */
void
rlock_redis_status_server(const char *version, const char *role)
{
	if (version != NULL)
		strlcpy(redis_version, version, sizeof(redis_version));
	if (role != NULL)
		strlcpy(redis_role, role, sizeof(redis_role));
	status_dirty = true;
}

/*
 * Redis refused ROLE on "conn" ("both": and INFO replication too), which
 * tell the primary's replicas.  Said once in the log: with INFO rlock
 * counts them as well; without either, rlock.sync_replicas = auto cannot,
 * and acquisitions are not confirmed by replicas (rlock_status() shows
 * it while it lasts).
 */
void
rlock_redis_status_sync_note(RlockConn *conn, const char *error, bool both)
{
	if (!both && !role_refused_logged)
	{
		role_refused_logged = true;
		ereport(LOG,
				(errmsg("rlock counts the replicas of Redis at %s with INFO replication: ROLE was refused",
						conn->server->address),
				 errdetail_internal("%s", error)));
	}
	if (both && !replicas_refused_warned &&
		rlock_sync_replicas == RLOCK_SYNC_AUTO)
	{
		replicas_refused_warned = true;
		ereport(WARNING,
				(errmsg("rlock cannot tell whether Redis at %s has replicas: ROLE and INFO replication were refused",
						conn->server->address),
				 errdetail("With rlock.sync_replicas = auto, acquisitions are not confirmed by replicas while this lasts. Redis said: %s",
						   error),
				 errhint("Allow the Redis user rlock connects as ROLE or INFO, or set rlock.sync_replicas to the number of replicas that must confirm.")));
	}
	status_dirty = true;
}

/*
 * Something rlock_status() shows changed: publish at the end of the pass.
 */
void
rlock_redis_status_touch(void)
{
	status_dirty = true;
}

/*
 * Did anything change since rlock_redis_status_take()?
 */
bool
rlock_redis_status_changed(void)
{
	return status_dirty;
}

/*
 * Copy the record into the status being published (the caller holds it
 * for writing): from now on it is unchanged.
 */
void
rlock_redis_status_take(RlockWorkerStatus *st)
{
	status_dirty = false;
	strlcpy(st->redis_version, redis_version, sizeof(st->redis_version));
	strlcpy(st->redis_role, redis_role, sizeof(st->redis_role));
	strlcpy(st->last_error, last_error, sizeof(st->last_error));
	st->last_error_at = last_error_at;
}

/*---- why a connection failed ----*/

void
rlock_conn_set_error(RlockConn *conn, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(conn->error, sizeof(conn->error), fmt, ap);
	va_end(ap);
	rlock_redis_status_error(conn->error);
}

/*
 * The connection cannot go on: Redis refused part of the handshake, a
 * file it needs cannot be read, or (reason NULL) a transport said why in
 * conn->error.  It is dropped at the next tick; the first reason given
 * is the one kept.
 */
void
rlock_conn_give_up(RlockConn *conn, const char *reason)
{
	if (conn->failed)
		return;
	if (reason != NULL)
		rlock_conn_set_error(conn, "%s", reason);
	conn->failed = true;
}

/*
 * A reply handler found a reply that makes no sense (a subscribe
 * confirmation for another channel, say): treat it as a protocol
 * violation.
 */
void
rlock_conn_fail(RlockConn *conn, const char *what)
{
	rlock_conn_violation(conn, RLOCK_VIOLATION_SHAPE, what);
}

/*
 * Redis sent something it never would: drop the connection, and log the
 * first time for each cause (a broken proxy does it again and again;
 * rlock_status() shows the latest).
 */
void
rlock_conn_violation(RlockConn *conn, RlockViolation why, const char *detail)
{
	Assert(why >= 0 && why < RLOCK_NVIOLATIONS);
	if (conn->failed)
		return;					/* the first failure is the one to report */
	rlock_conn_give_up(conn, detail);
	/* the outage this starts is logged here, or was logged before */
	conn->quiet_drop = true;
	if (!violation_logged[why])
	{
		violation_logged[why] = true;
		conn->ready_logged = false; /* and its end will be */
		ereport(LOG,
				(errmsg("rlock dropped its %s connection to Redis at %s: %s",
						conn->role, conn->server->address, detail),
				 errdetail("Redis, or something between rlock and Redis, sent what Redis never sends; rlock connects again.  Later drops for the same cause are not logged.")));
	}
}

/*
 * Has this connection sent commands and heard nothing back yet?  A server
 * that closes it then most likely refused it outright (a TLS port, a
 * client certificate it wanted): the transports word their failure so.
 */
bool
rlock_conn_unanswered(RlockConn *conn)
{
	return conn->state == RLOCK_CONN_HANDSHAKE && conn->sends > 0 &&
		conn->handshake == (int) conn->sends;
}
