/*-------------------------------------------------------------------------
 *
 * conn.c
 *		The worker's Redis connections: a hiredis adapter for PostgreSQL's
 *		WaitEventSet, and the life cycle of each connection.
 *
 * A server has two hiredis async connections: one for commands and one for
 * pub/sub (a subscribed connection cannot run scripts).  Both sockets sit
 * in one WaitEventSet with the worker's latch and postmaster death, so the
 * worker sleeps in exactly one place.
 *
 * hiredis 0.14.1 calls its adapter hooks to say which socket events it
 * wants; the hooks only record the wish, and rlock_conn_wait() turns it
 * into ModifyWaitEvent calls before sleeping.  When hiredis frees a context
 * (error, EOF, or our own rlock_conn_drop) its cleanup hook marks the set
 * for rebuilding, as PostgreSQL 15 cannot remove an event from a set.
 *
 * hiredis has no timeouts of its own in this version, so each connection
 * keeps a deadline for connecting and for its handshake, and the worker
 * drops a connection whose oldest command has waited longer than
 * rlock.command_timeout.  Reconnection uses exponential back-off from 50 ms,
 * capped at one second; the back-off starts over only after a connection
 * stayed up for a while, so a server that accepts connections and then
 * drops them (an ACL refusing SUBSCRIBE, say) is not hammered.  Each
 * outage is logged once, and its end once.  A host name is resolved with
 * getaddrinfo_a(), which signals completion with SIGUSR2, so the worker
 * never blocks on DNS.
 *
 * Each new command connection first closes the previous one on the server
 * side (CLIENT KILL ID), so that a command still in the network when the
 * worker gave up on it cannot run after the commands that restate the
 * counts (see rlock_conn_fence).
 *
 * Replies reach the worker through hiredis callbacks.  Those never raise an
 * error (that would longjmp out of hiredis) and never free a context; a
 * callback that finds a connection unusable sets "failed", and the main
 * loop drops the connection after hiredis has returned.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "worker/worker_int.h"

#define RLOCK_BACKOFF_MIN_MS	50
#define RLOCK_BACKOFF_MAX_MS	1000

/* A connection up for this long counts as stable when it is lost */
#define RLOCK_STABLE_MS			1000

typedef struct RlockServer
{
	/* the settings this server was set up with */
	char	   *host;
	int			port;
	char	   *unix_socket;
	int			database;
	char	   *username;
	char	   *password_file;
	char		address[RLOCK_ADDRESS_LEN];	/* for messages */

	/* resolution of a host name that is not a numeric address */
	bool		resolving;
	bool		resolve_stale;	/* settings changed while resolving */
	struct gaicb gai;
	struct addrinfo gai_hints;
	char		gai_name[NI_MAXHOST];
	char		resolved[INET6_ADDRSTRLEN];	/* empty if none */
	char		resolve_error[RLOCK_DETAIL_LEN];

	RlockConn	cmd;
	RlockConn	sub;
} RlockServer;

RlockServer *rlock_server = NULL;

static WaitEventSet *wait_set = NULL;
static bool wait_set_stale = true;

/* Send a PING on the idle command connection (rlock_conn_keepalive) */
static bool keepalive = false;

/* What rlock_status() shows, and whether it changed since published */
static bool status_dirty = true;
static char redis_version[32];
static char redis_role[16];
static char last_error[RLOCK_DETAIL_LEN];
static TimestampTz last_error_at = 0;

static void rlock_conn_start(RlockConn *conn, TimestampTz now);
static void rlock_conn_closed(RlockConn *conn);
static void rlock_conn_set_error(RlockConn *conn, const char *msg);
static void rlock_conn_close(RlockConn *conn, const char *reason,
							 bool first_cause);

RlockConn *
rlock_cmd_conn(void)
{
	return &rlock_server->cmd;
}

RlockConn *
rlock_sub_conn(void)
{
	return &rlock_server->sub;
}

const char *
rlock_server_address(void)
{
	return rlock_server->address;
}

RlockCmd *
rlock_cmd_new(RlockCmdType type)
{
	RlockCmd   *cmd = MemoryContextAllocZero(TopMemoryContext,
											 sizeof(RlockCmd));

	cmd->type = type;
	return cmd;
}

void
rlock_cmd_free(RlockCmd *cmd)
{
	if (cmd->holds != NULL)
		pfree(cmd->holds);
	pfree(cmd);
}

/*---- the hiredis adapter hooks: record what hiredis wants ----*/

static void
rlock_ev_add_read(void *privdata)
{
	((RlockConn *) privdata)->want |= WL_SOCKET_READABLE;
}

static void
rlock_ev_del_read(void *privdata)
{
	((RlockConn *) privdata)->want &= ~WL_SOCKET_READABLE;
}

static void
rlock_ev_add_write(void *privdata)
{
	((RlockConn *) privdata)->want |= WL_SOCKET_WRITEABLE;
}

static void
rlock_ev_del_write(void *privdata)
{
	((RlockConn *) privdata)->want &= ~WL_SOCKET_WRITEABLE;
}

/*
 * hiredis is freeing the context: the socket is gone.
 */
static void
rlock_ev_cleanup(void *privdata)
{
	RlockConn  *conn = (RlockConn *) privdata;

	/* an error of hiredis's own (EOF, I/O); our drops have set a reason */
	if (conn->ac != NULL && conn->ac->c.err != 0)
		rlock_conn_set_error(conn, conn->ac->c.errstr);
	conn->ac = NULL;
	conn->want = 0;
	conn->pos = -1;
	wait_set_stale = true;
	rlock_conn_closed(conn);
}

/*---- settings and setup ----*/

static char *
rlock_strdup(const char *s)
{
	return MemoryContextStrdup(TopMemoryContext, s ? s : "");
}

static void
rlock_server_configure(RlockServer *srv)
{
	srv->host = rlock_strdup(rlock_host);
	srv->port = rlock_port;
	srv->unix_socket = rlock_strdup(rlock_unix_socket);
	srv->database = rlock_database;
	srv->username = rlock_strdup(rlock_username);
	srv->password_file = rlock_strdup(rlock_password_file);
	if (srv->unix_socket[0] != '\0')
		snprintf(srv->address, sizeof(srv->address), "unix:%s",
				 srv->unix_socket);
	else if (strchr(srv->host, ':') != NULL)
		snprintf(srv->address, sizeof(srv->address), "[%s]:%d",
				 srv->host, srv->port);
	else
		snprintf(srv->address, sizeof(srv->address), "%s:%d",
				 srv->host, srv->port);
	srv->resolved[0] = '\0';
	srv->resolve_error[0] = '\0';
	srv->resolve_stale = srv->resolving;
}

/*
 * Forget the history of a connection: connect at once, log afresh.
 */
static void
rlock_conn_start_over(RlockConn *conn)
{
	conn->retry_at = 0;
	conn->backoff_ms = RLOCK_BACKOFF_MIN_MS;
	conn->outage_logged = false;
	conn->ready_logged = false;
	conn->flap_logged = false;
}

static void
rlock_conn_setup(RlockConn *conn, RlockServer *srv, const char *role,
				 bool subscriber)
{
	memset(conn, 0, sizeof(RlockConn));
	conn->role = role;
	conn->subscriber = subscriber;
	conn->server = srv;
	conn->state = RLOCK_CONN_DOWN;
	conn->since = GetCurrentTimestamp();
	conn->pos = -1;
	rlock_conn_start_over(conn);
	dlist_init(&conn->inflight);
	snprintf(conn->error, sizeof(conn->error), "not connected yet");
}

void
rlock_conn_init(void)
{
	rlock_server = MemoryContextAllocZero(TopMemoryContext,
										  sizeof(RlockServer));
	rlock_server_configure(rlock_server);
	rlock_conn_setup(&rlock_server->cmd, rlock_server, "command", false);
	rlock_conn_setup(&rlock_server->sub, rlock_server, "subscriber", true);
}

/*
 * After a configuration reload: if any connection setting changed, drop
 * both connections and connect again with the new settings at once.
 */
void
rlock_conn_reload(void)
{
	RlockServer *srv = rlock_server;

	if (strcmp(srv->host, rlock_host) == 0 &&
		srv->port == rlock_port &&
		strcmp(srv->unix_socket, rlock_unix_socket) == 0 &&
		srv->database == rlock_database &&
		strcmp(srv->username, rlock_username) == 0 &&
		strcmp(srv->password_file, rlock_password_file) == 0)
		return;

	ereport(LOG,
			(errmsg("rlock connection settings changed, reconnecting to Redis")));
	rlock_conn_drop(&srv->cmd, "connection settings changed");
	rlock_conn_drop(&srv->sub, "connection settings changed");
	pfree(srv->host);
	pfree(srv->unix_socket);
	pfree(srv->username);
	pfree(srv->password_file);
	rlock_server_configure(srv);
	rlock_status_touch();
	rlock_conn_start_over(&srv->cmd);
	rlock_conn_start_over(&srv->sub);
}

/*---- host name resolution ----*/

/*
 * SIGUSR2 handler: getaddrinfo_a() finished.  Wake the main loop.
 */
static void
rlock_resolver_signal(SIGNAL_ARGS)
{
	int			save_errno = errno;

	SetLatch(MyLatch);
	errno = save_errno;
}

static bool
rlock_is_numeric_host(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 ||
		inet_pton(AF_INET6, host, buf) == 1;
}

/*
 * Start resolving the server's host name in the background.
 */
static void
rlock_resolve_start(RlockServer *srv)
{
	struct gaicb *list[1];
	struct sigevent sev;
	int			rc;

	if (srv->resolving)
		return;

	pqsignal(SIGUSR2, rlock_resolver_signal);
	memset(&srv->gai, 0, sizeof(srv->gai));
	memset(&srv->gai_hints, 0, sizeof(srv->gai_hints));
	srv->gai_hints.ai_family = AF_UNSPEC;
	srv->gai_hints.ai_socktype = SOCK_STREAM;
	strlcpy(srv->gai_name, srv->host, sizeof(srv->gai_name));
	srv->gai.ar_name = srv->gai_name;
	srv->gai.ar_request = &srv->gai_hints;

	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGUSR2;

	list[0] = &srv->gai;
	rc = getaddrinfo_a(GAI_NOWAIT, list, 1, &sev);
	if (rc != 0)
	{
		snprintf(srv->resolve_error, sizeof(srv->resolve_error),
				 "could not resolve \"%s\": %s", srv->host, gai_strerror(rc));
		return;
	}
	srv->resolving = true;
	srv->resolve_stale = false;
}

/*
 * Collect the result of a finished resolution, if any.
 */
static void
rlock_resolve_check(RlockServer *srv)
{
	int			rc;
	int			family;
	struct addrinfo *ai;

	if (!srv->resolving)
		return;
	rc = gai_error(&srv->gai);
	if (rc == EAI_INPROGRESS)
		return;
	srv->resolving = false;
	if (srv->resolve_stale)
	{
		if (rc == 0)
			freeaddrinfo(srv->gai.ar_result);
		return;
	}
	if (rc != 0)
	{
		snprintf(srv->resolve_error, sizeof(srv->resolve_error),
				 "could not resolve \"%s\": %s", srv->host, gai_strerror(rc));
		return;
	}
	/* like hiredis itself, prefer an IPv4 address */
	for (family = AF_INET;; family = AF_INET6)
	{
		for (ai = srv->gai.ar_result; ai != NULL; ai = ai->ai_next)
		{
			const void *addr;

			if (ai->ai_family != family)
				continue;
			if (family == AF_INET)
				addr = &((struct sockaddr_in *) ai->ai_addr)->sin_addr;
			else
				addr = &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr;
			if (inet_ntop(family, addr, srv->resolved,
						  sizeof(srv->resolved)) != NULL)
				break;
		}
		if (ai != NULL || family == AF_INET6)
			break;
	}
	freeaddrinfo(srv->gai.ar_result);
	if (srv->resolved[0] == '\0')
		snprintf(srv->resolve_error, sizeof(srv->resolve_error),
				 "host name \"%s\" has no usable address", srv->host);
}

/*---- connection life cycle ----*/

/*
 * Log the first failure of an outage; later ones would only repeat it.
 */
static void
rlock_conn_log_failure(RlockConn *conn, bool was_ready)
{
	if (conn->outage_logged)
		return;
	conn->outage_logged = true;
	conn->ready_logged = false;
	if (was_ready)
		ereport(LOG,
				(errmsg("rlock lost its %s connection to Redis at %s: %s",
						conn->role, conn->server->address, conn->error)));
	else
		ereport(LOG,
				(errmsg("rlock could not open its %s connection to Redis at %s: %s",
						conn->role, conn->server->address, conn->error)));
}

static void
rlock_conn_set_error(RlockConn *conn, const char *msg)
{
	strlcpy(conn->error, msg, sizeof(conn->error));
	rlock_status_error(msg);
}

/*
 * Remember an error for rlock_status(): a connection failure or an error
 * reply from Redis.
 */
void
rlock_status_error(const char *msg)
{
	strlcpy(last_error, msg, sizeof(last_error));
	last_error_at = GetCurrentTimestamp();
	status_dirty = true;
}

/*
 * Something rlock_status() shows changed: publish at the end of the pass.
 */
void
rlock_status_touch(void)
{
	status_dirty = true;
}

/*
 * Copy the state of the connections into shared memory, if it changed.
 */
void
rlock_status_publish(void)
{
	RlockWorkerStatus *st = &rlock_shared->status;

	if (!status_dirty &&
		st->cmd_state == (int) rlock_server->cmd.state &&
		st->sub_state == (int) rlock_server->sub.state)
		return;
	status_dirty = false;

	rlock_status_begin_write();
	st->cmd_state = rlock_server->cmd.state;
	st->sub_state = rlock_server->sub.state;
	st->cmd_since = rlock_server->cmd.since;
	st->sub_since = rlock_server->sub.since;
	strlcpy(st->address, rlock_server->address, sizeof(st->address));
	strlcpy(st->redis_version, redis_version, sizeof(st->redis_version));
	strlcpy(st->redis_role, redis_role, sizeof(st->redis_role));
	strlcpy(st->last_error, last_error, sizeof(st->last_error));
	st->last_error_at = last_error_at;
	st->channels = rlock_waiters_channels();
	rlock_status_end_write();
}

/*
 * The context is gone (hiredis freed it).  Fail what was on the wire,
 * tell the worker, and schedule the next attempt.
 */
static void
rlock_conn_closed(RlockConn *conn)
{
	bool		was_ready = (conn->state == RLOCK_CONN_READY);
	dlist_mutable_iter iter;
	TimestampTz now = GetCurrentTimestamp();

	conn->state = RLOCK_CONN_DOWN;
	if (was_ready)
		conn->since = now;		/* an outage begins */
	conn->handshake = 0;
	conn->failed = false;

	/* commands whose callbacks hiredis did not run: the subscriber's */
	dlist_foreach_modify(iter, &conn->inflight)
	{
		RlockCmd   *cmd = dlist_container(RlockCmd, node, iter.cur);

		dlist_delete(&cmd->node);
		rlock_worker_reply(conn, cmd, NULL);
		rlock_cmd_free(cmd);
	}

	/* a connection lost after a stable while is a new outage */
	if (was_ready &&
		now >= TimestampTzPlusMilliseconds(conn->ready_at, RLOCK_STABLE_MS))
	{
		conn->backoff_ms = RLOCK_BACKOFF_MIN_MS;
		conn->outage_logged = false;
		conn->flap_logged = false;
	}
	else if (was_ready && conn->ready_logged && !conn->flap_logged)
	{
		conn->flap_logged = true;
		ereport(LOG,
				(errmsg("rlock %s connection to Redis at %s keeps failing right after it is made: %s",
						conn->role, conn->server->address, conn->error)));
	}
	conn->retry_at = TimestampTzPlusMilliseconds(now, conn->backoff_ms);
	conn->backoff_ms = Min(conn->backoff_ms * 2, RLOCK_BACKOFF_MAX_MS);
	rlock_conn_log_failure(conn, was_ready);
	rlock_worker_conn_lost(conn);
}

/*
 * Close a connection on purpose.  hiredis runs the callbacks of everything
 * on the wire with a NULL reply, then our cleanup hook.
 */
void
rlock_conn_drop(RlockConn *conn, const char *reason)
{
	rlock_conn_close(conn, reason, true);
}

/*
 * The same; the reason goes into rlock_status()'s last error only if it is
 * the first cause (a connection dropped because the other one failed
 * keeps that failure there).
 */
static void
rlock_conn_close(RlockConn *conn, const char *reason, bool first_cause)
{
	if (conn->ac == NULL)
		return;
	if (first_cause)
		rlock_conn_set_error(conn, reason);
	else
		strlcpy(conn->error, reason, sizeof(conn->error));
	redisAsyncFree(conn->ac);
}

/*
 * Pull "name:value" out of an INFO reply into buf.  False if absent.
 */
static bool
rlock_info_field(const char *info, const char *name, char *buf, size_t size)
{
	size_t		namelen = strlen(name);
	const char *line = info;

	while (line != NULL && *line != '\0')
	{
		if (strncmp(line, name, namelen) == 0 && line[namelen] == ':')
		{
			const char *value = line + namelen + 1;

			snprintf(buf, size, "%.*s", (int) strcspn(value, "\r\n"), value);
			return true;
		}
		line = strchr(line, '\n');
		if (line != NULL)
			line++;
	}
	return false;
}

/*
 * Send a handshake command whose failure does not fail the connection
 * (index: RLOCK_HANDSHAKE_*, which says what its reply is for).
 */
static void
rlock_conn_send_optional(RlockConn *conn, int index, int argc,
						 const char **argv, const size_t *lens)
{
	RlockCmd   *cmd = rlock_cmd_new(RLOCK_CMD_HANDSHAKE);

	cmd->index = index;
	(void) rlock_conn_send(conn, cmd, argc, argv, lens);
}

/*
 * Part of the command connection's handshake: ask which server this is
 * (INFO server gives its version and its run_id, which names the server
 * process) and this connection's CLIENT ID.  The fence against the
 * previous connection follows from the INFO reply.
 */
static void
rlock_conn_identify(RlockConn *conn)
{
	static const char *info[2] = {"INFO", "server"};
	static const size_t info_lens[2] = {4, 6};
	static const char *client_id[2] = {"CLIENT", "ID"};
	static const size_t client_id_lens[2] = {6, 2};

	conn->run_id[0] = '\0';
	redis_version[0] = '\0';
	rlock_conn_send_optional(conn, RLOCK_HANDSHAKE_INFO, 2, info, info_lens);
	rlock_conn_send_optional(conn, RLOCK_HANDSHAKE_CLIENT_ID, 2, client_id,
							 client_id_lens);
}

/*
 * Close the previous command connection on the server side, if Redis
 * still has it, before anything but the handshake is sent on this one: a
 * command of the old connection that had not reached Redis when the worker
 * gave up on it (delayed in the network, or read by a Redis that was
 * stalled) must not run after the commands that restate the counts, and
 * once its connection is closed it cannot run at all.  The previous
 * connection's id is in shared memory, so this covers a restarted worker
 * too.
 *
 * A client id means something only to the server process that gave it:
 * a restarted Redis, a promoted replica or another server after a change
 * of settings numbers its clients afresh, and the id may belong to some
 * other application there.  So the id is used only when this connection
 * reached the same server process, known by its run_id.  Sent from the
 * INFO reply, the kill still goes out before the handshake ends.
 */
static void
rlock_conn_fence(RlockConn *conn)
{
	const char *argv[4];
	size_t		lens[4];
	char		id[24];
	int64		previous;
	bool		same_server;

	SpinLockAcquire(&rlock_shared->mutex);
	previous = rlock_shared->cmd_client_id;
	same_server = (conn->run_id[0] != '\0' &&
				   strcmp(rlock_shared->cmd_run_id, conn->run_id) == 0);
	SpinLockRelease(&rlock_shared->mutex);

	if (previous <= 0 || !same_server)
		return;
	argv[0] = "CLIENT";
	argv[1] = "KILL";
	argv[2] = "ID";
	argv[3] = id;
	lens[0] = 6;
	lens[1] = 4;
	lens[2] = 2;
	lens[3] = snprintf(id, sizeof(id), INT64_FORMAT, previous);
	rlock_conn_send_optional(conn, RLOCK_HANDSHAKE_FENCE, 4, argv, lens);
}

/*
 * The reply to an optional handshake command.
 */
static void
rlock_optional_reply(RlockConn *conn, RlockCmd *cmd, redisReply *reply)
{
	static bool fence_warned = false;

	if (cmd->index == RLOCK_HANDSHAKE_INFO &&
		(reply->type == REDIS_REPLY_STRING ||
		 reply->type == REDIS_REPLY_STATUS))
	{
		(void) rlock_info_field(reply->str, "redis_version",
								redis_version, sizeof(redis_version));
		if (!rlock_info_field(reply->str, "run_id",
							  conn->run_id, sizeof(conn->run_id)))
			conn->run_id[0] = '\0';
		status_dirty = true;
		rlock_conn_fence(conn);
	}
	else if (cmd->index == RLOCK_HANDSHAKE_CLIENT_ID)
	{
		int64		id = (reply->type == REDIS_REPLY_INTEGER) ?
		reply->integer : 0;

		/* without the server's name the id cannot be used safely */
		SpinLockAcquire(&rlock_shared->mutex);
		rlock_shared->cmd_client_id = (conn->run_id[0] != '\0') ? id : 0;
		strlcpy(rlock_shared->cmd_run_id, conn->run_id,
				sizeof(rlock_shared->cmd_run_id));
		SpinLockRelease(&rlock_shared->mutex);
	}
	if (reply->type == REDIS_REPLY_ERROR && !fence_warned &&
		cmd->index != RLOCK_HANDSHAKE_OPTIONAL &&
		strstr(reply->str, "No such client") == NULL)
	{
		fence_warned = true;
		ereport(LOG,
				(errmsg("rlock cannot close its earlier connections to Redis at %s on the server side",
						conn->server->address),
				 errdetail_internal("%s", reply->str),
				 errhint("Allow the rlock user INFO, CLIENT ID and CLIENT KILL, or a command that was under way when a connection was given up may still run later.")));
	}
}

/*
 * hiredis connect callback: the socket is connected (or not).  Send the
 * handshake: AUTH, SELECT, CLIENT SETNAME and, on the command connection,
 * INFO server, CLIENT ID and SCRIPT LOAD, then (from the INFO reply) the
 * fence against the previous connection.  They all run before anything
 * else we send.
 */
static void
rlock_on_connect(const redisAsyncContext *cac, int status)
{
	redisAsyncContext *ac = (redisAsyncContext *) cac;
	RlockConn  *conn = (RlockConn *) ac->data;
	RlockServer *srv = conn->server;
	char		password[1024];
	bool		have_password = false;
	char		dbname[16];

	if (status != REDIS_OK)
	{
		rlock_conn_set_error(conn, ac->errstr);
		return;					/* hiredis frees the context next */
	}

	conn->state = RLOCK_CONN_HANDSHAKE;

	if (srv->password_file[0] != '\0')
	{
		FILE	   *f = AllocateFile(srv->password_file, "r");

		if (f == NULL || fgets(password, sizeof(password), f) == NULL)
		{
			snprintf(conn->error, sizeof(conn->error),
					 "could not read password file \"%s\": %s",
					 srv->password_file,
					 f == NULL ? strerror(errno) : "file is empty");
			if (f != NULL)
				FreeFile(f);
			conn->failed = true;
			return;
		}
		FreeFile(f);
		password[strcspn(password, "\r\n")] = '\0';
		have_password = true;
	}

	if (srv->username[0] != '\0' || have_password)
	{
		const char *argv[3];
		size_t		lens[3];
		int			argc = 0;

		argv[argc] = "AUTH";
		lens[argc++] = 4;
		if (srv->username[0] != '\0')
		{
			argv[argc] = srv->username;
			lens[argc++] = strlen(srv->username);
		}
		argv[argc] = have_password ? password : "";
		lens[argc] = strlen(argv[argc]);
		argc++;
		(void) rlock_conn_send(conn, rlock_cmd_new(RLOCK_CMD_HANDSHAKE),
							   argc, argv, lens);
		explicit_bzero(password, sizeof(password));
	}

	if (!conn->subscriber && srv->database != 0)
	{
		const char *argv[2];
		size_t		lens[2];

		snprintf(dbname, sizeof(dbname), "%d", srv->database);
		argv[0] = "SELECT";
		lens[0] = 6;
		argv[1] = dbname;
		lens[1] = strlen(dbname);
		(void) rlock_conn_send(conn, rlock_cmd_new(RLOCK_CMD_HANDSHAKE),
							   2, argv, lens);
	}

	{
		const char *argv[3];
		size_t		lens[3];

		argv[0] = "CLIENT";
		argv[1] = "SETNAME";
		argv[2] = conn->subscriber ? "rlock_subscriber" : "rlock_command";
		lens[0] = 6;
		lens[1] = 7;
		lens[2] = strlen(argv[2]);
		/* an ACL may forbid CLIENT SETNAME: not a reason to fail */
		rlock_conn_send_optional(conn, RLOCK_HANDSHAKE_OPTIONAL, 3, argv, lens);
	}

	if (!conn->subscriber)
	{
		rlock_conn_identify(conn);
		rlock_scripts_load(conn);
	}
}

/*
 * hiredis disconnect callback: remember why, for messages.
 */
static void
rlock_on_disconnect(const redisAsyncContext *ac, int status)
{
	RlockConn  *conn = (RlockConn *) ac->data;

	if (status != REDIS_OK && ac->errstr != NULL)
		rlock_conn_set_error(conn, ac->errstr);
	else if (status == REDIS_OK && conn->error[0] == '\0')
		rlock_conn_set_error(conn, "connection closed");
}

/*
 * Ask the server for its role, for rlock_status() (its version came with
 * the handshake).  An ACL may refuse it: the role is then shown as
 * unknown.
 */
static void
rlock_conn_ask_role(RlockConn *conn)
{
	const char *role[1] = {"ROLE"};
	size_t		role_lens[1] = {4};

	redis_role[0] = '\0';
	(void) rlock_conn_send(conn, rlock_cmd_new(RLOCK_CMD_SERVER_INFO),
						   1, role, role_lens);
}

/*
 * The answer to ROLE: an array whose first element names the role.
 */
static void
rlock_role_reply(redisReply *reply)
{
	if (reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
		reply->elements > 0 &&
		reply->element[0]->type == REDIS_REPLY_STRING)
		strlcpy(redis_role, reply->element[0]->str, sizeof(redis_role));
	status_dirty = true;
}

/*
 * A handshake reply.  Errors fail the connection, except for CLIENT
 * SETNAME.  The last one makes the connection READY.
 */
static void
rlock_handshake_reply(RlockConn *conn, RlockCmd *cmd, redisReply *reply)
{
	if (reply == NULL || conn->failed)
		return;					/* the first failure is the one to report */
	if (cmd->type == RLOCK_CMD_HANDSHAKE && cmd->index < 0)
		rlock_optional_reply(conn, cmd, reply);
	else if (reply->type == REDIS_REPLY_ERROR)
	{
		snprintf(conn->error, sizeof(conn->error), "%s", reply->str);
		conn->failed = true;
		return;
	}
	if (cmd->type == RLOCK_CMD_SCRIPT_LOAD &&
		(reply->type != REDIS_REPLY_STRING ||
		 !rlock_script_loaded(cmd->index, reply->str, reply->len)))
	{
		snprintf(conn->error, sizeof(conn->error),
				 "unexpected reply to SCRIPT LOAD");
		conn->failed = true;
		return;
	}
	if (--conn->handshake == 0 && !conn->failed &&
		conn->state == RLOCK_CONN_HANDSHAKE)
	{
		conn->state = RLOCK_CONN_READY;
		conn->ready_at = conn->since = GetCurrentTimestamp();
		status_dirty = true;
		conn->error[0] = '\0';
		if (conn->ever_ready)
			rlock_count(RLOCK_STAT_RECONNECTS, 1);
		conn->ever_ready = true;
		if (!conn->subscriber)
			rlock_conn_ask_role(conn);
		if (!conn->ready_logged)
		{
			ereport(LOG,
					(errmsg("rlock %s connection to Redis at %s is ready",
							conn->role, conn->server->address)));
			conn->ready_logged = true;
		}
		rlock_worker_conn_ready(conn);
	}
}

/*
 * Reply callback of the command connection: privdata is our RlockCmd.
 */
static void
rlock_cmd_callback(redisAsyncContext *ac, void *r, void *privdata)
{
	RlockConn  *conn = (RlockConn *) ac->data;
	RlockCmd   *cmd = (RlockCmd *) privdata;
	redisReply *reply = (redisReply *) r;

	dlist_delete(&cmd->node);
	if (reply != NULL)
		pg_atomic_write_u64(&rlock_shared->cmd_reply_at,
							(uint64) GetCurrentTimestamp());
	if (reply != NULL && reply->type == REDIS_REPLY_ERROR &&
		cmd->type != RLOCK_CMD_SERVER_INFO &&
		!(cmd->type == RLOCK_CMD_HANDSHAKE && cmd->index < 0))
	{
		rlock_count(RLOCK_STAT_REDIS_ERRORS, 1);
		rlock_status_error(reply->str);
	}
	switch (cmd->type)
	{
		case RLOCK_CMD_HANDSHAKE:
		case RLOCK_CMD_SCRIPT_LOAD:
			rlock_handshake_reply(conn, cmd, reply);
			break;
		case RLOCK_CMD_SERVER_INFO:
			rlock_role_reply(reply);
			break;
		case RLOCK_CMD_PING:
			break;
		default:
			if (reply != NULL)
				rlock_latency(RLOCK_LATENCY_ROUND_TRIP,
							  GetCurrentTimestamp() - cmd->sent_at);
			rlock_worker_reply(conn, cmd, r);
			break;
	}
	rlock_cmd_free(cmd);
}

/*
 * Reply callback of the subscriber connection.  hiredis keys subscription
 * callbacks by channel and can hand a reply to the callback of an earlier
 * one, so every command here uses this one callback with no privdata:
 * published messages are told apart by their shape, and every other reply
 * answers the oldest command on the wire.
 */
static void
rlock_sub_callback(redisAsyncContext *ac, void *r, void *privdata)
{
	RlockConn  *conn = (RlockConn *) ac->data;
	redisReply *reply = (redisReply *) r;
	RlockCmd   *cmd;

	if (reply == NULL)
		return;					/* the context is going away */

	if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
		reply->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(reply->element[0]->str, "message") == 0)
	{
		redisReply *channel = reply->element[1];
		redisReply *payload = reply->element[2];

		if (channel->type == REDIS_REPLY_STRING &&
			payload->type == REDIS_REPLY_STRING)
			rlock_waiters_message(channel->str, channel->len,
								  payload->str, payload->len);
		return;
	}

	if (dlist_is_empty(&conn->inflight))
	{
		snprintf(conn->error, sizeof(conn->error),
				 "unexpected reply on the subscriber connection");
		conn->failed = true;
		return;
	}
	cmd = dlist_container(RlockCmd, node, dlist_pop_head_node(&conn->inflight));
	if (reply->type == REDIS_REPLY_ERROR &&
		!(cmd->type == RLOCK_CMD_HANDSHAKE && cmd->index < 0))
	{
		rlock_count(RLOCK_STAT_REDIS_ERRORS, 1);
		rlock_status_error(reply->str);
	}
	if (cmd->type == RLOCK_CMD_HANDSHAKE)
		rlock_handshake_reply(conn, cmd, reply);
	else
		rlock_worker_reply(conn, cmd, reply);
	rlock_cmd_free(cmd);
}

/*
 * Send one command.  Returns false (and frees cmd) if the connection
 * cannot take it.  Nothing is written until rlock_conn_flush() or the next
 * writeable event, so commands queued in one pass go out in one write.
 */
bool
rlock_conn_send(RlockConn *conn, RlockCmd *cmd, int argc, const char **argv,
				const size_t *argvlen)
{
	int			rc;

	if (conn->ac == NULL || conn->failed)
	{
		rlock_cmd_free(cmd);
		return false;
	}
	if (conn->subscriber)
		rc = redisAsyncCommandArgv(conn->ac, rlock_sub_callback, NULL,
								   argc, argv, argvlen);
	else
		rc = redisAsyncCommandArgv(conn->ac, rlock_cmd_callback, cmd,
								   argc, argv, argvlen);
	if (rc != REDIS_OK)
	{
		rlock_cmd_free(cmd);
		return false;
	}
	cmd->sent_at = GetCurrentTimestamp();
	conn->last_sent_at = cmd->sent_at;
	dlist_push_tail(&conn->inflight, &cmd->node);
	if (cmd->type == RLOCK_CMD_HANDSHAKE || cmd->type == RLOCK_CMD_SCRIPT_LOAD)
		conn->handshake++;
	return true;
}

/*
 * Open a new connection (or start resolving the host name first).
 */
static void
rlock_conn_start(RlockConn *conn, TimestampTz now)
{
	RlockServer *srv = conn->server;
	redisAsyncContext *ac;

	/* the last failure stays in conn->error, for messages, until READY */
	if (conn->state == RLOCK_CONN_DOWN)
		conn->deadline = TimestampTzPlusMilliseconds(now,
													 rlock_connect_timeout);

	if (srv->unix_socket[0] != '\0')
		ac = redisAsyncConnectUnix(srv->unix_socket);
	else if (rlock_is_numeric_host(srv->host))
		ac = redisAsyncConnect(srv->host, srv->port);
	else if (srv->resolved[0] != '\0')
		ac = redisAsyncConnect(srv->resolved, srv->port);
	else
	{
		rlock_resolve_start(srv);
		if (!srv->resolving)
		{
			rlock_conn_set_error(conn, srv->resolve_error);
			rlock_conn_closed(conn);
			return;
		}
		conn->state = RLOCK_CONN_RESOLVING;
		return;
	}

	if (ac == NULL || ac->err)
	{
		rlock_conn_set_error(conn, ac ? ac->errstr : "out of memory");
		if (ac != NULL)
			redisAsyncFree(ac);
		srv->resolved[0] = '\0';
		rlock_conn_closed(conn);
		return;
	}

	conn->ac = ac;
	conn->state = RLOCK_CONN_CONNECTING;
	conn->want = 0;
	conn->registered = 0;
	conn->pos = -1;
	conn->handshake = 0;
	conn->failed = false;
	ac->data = conn;
	ac->ev.data = conn;
	ac->ev.addRead = rlock_ev_add_read;
	ac->ev.delRead = rlock_ev_del_read;
	ac->ev.addWrite = rlock_ev_add_write;
	ac->ev.delWrite = rlock_ev_del_write;
	ac->ev.cleanup = rlock_ev_cleanup;
	redisAsyncSetConnectCallback(ac, rlock_on_connect);
	redisAsyncSetDisconnectCallback(ac, rlock_on_disconnect);
	if (srv->unix_socket[0] == '\0')
		(void) redisEnableKeepAlive(&ac->c);
	wait_set_stale = true;
}

/*
 * With keepalive on, the command connection is never idle for longer than
 * this: a PING goes out, and a server that stopped answering is found by
 * the command deadline even when nothing else is sent (waiters sleeping
 * on a long TTL, say).
 */
static TimestampTz
rlock_conn_keepalive_at(RlockConn *conn)
{
	int			interval = Max(Min(1000, rlock_command_timeout / 2), 10);

	return TimestampTzPlusMilliseconds(conn->last_sent_at, interval);
}

static void
rlock_conn_ping(RlockConn *conn)
{
	const char *argv[1] = {"PING"};
	size_t		lens[1] = {4};

	(void) rlock_conn_send(conn, rlock_cmd_new(RLOCK_CMD_PING), 1, argv, lens);
}

/*
 * Keep the command connection checked while "on" (the worker has waiting
 * requests).
 */
void
rlock_conn_keepalive(bool on)
{
	keepalive = on;
}

/*
 * Advance one connection's life cycle: start attempts when due, enforce
 * the connect and command deadlines, drop connections found failed, and
 * check an idle command connection when asked to.
 */
static void
rlock_conn_tick_one(RlockConn *conn, TimestampTz now)
{
	RlockServer *srv = conn->server;

	if (conn->failed && conn->ac != NULL)
	{
		redisAsyncFree(conn->ac);
		return;
	}

	switch (conn->state)
	{
		case RLOCK_CONN_DOWN:
			if (now >= conn->retry_at)
				rlock_conn_start(conn, now);
			break;
		case RLOCK_CONN_RESOLVING:
			rlock_resolve_check(srv);
			if (!srv->resolving)
			{
				if (srv->resolved[0] != '\0')
					rlock_conn_start(conn, now);
				else
				{
					rlock_conn_set_error(conn, srv->resolve_error);
					rlock_conn_closed(conn);
				}
			}
			else if (now >= conn->deadline)
			{
				snprintf(conn->error, sizeof(conn->error),
						 "could not resolve \"%s\" within rlock.connect_timeout",
						 srv->host);
				rlock_conn_closed(conn);
			}
			break;
		case RLOCK_CONN_CONNECTING:
		case RLOCK_CONN_HANDSHAKE:
			if (now >= conn->deadline)
			{
				srv->resolved[0] = '\0';
				rlock_conn_drop(conn, conn->state == RLOCK_CONN_CONNECTING ?
								"timed out while connecting" :
								"timed out during the connection handshake");
			}
			break;
		case RLOCK_CONN_READY:
			if (!dlist_is_empty(&conn->inflight))
			{
				RlockCmd   *oldest = dlist_head_element(RlockCmd, node,
														&conn->inflight);

				if (now >= TimestampTzPlusMilliseconds(oldest->sent_at,
													   rlock_command_timeout))
				{
					char		msg[128];

					snprintf(msg, sizeof(msg),
							 "no answer within rlock.command_timeout (%d ms)",
							 rlock_command_timeout);
					rlock_conn_drop(conn, msg);

					/*
					 * A server that does not answer commands is not to be
					 * trusted with unlock messages either: subscribe anew
					 * once it answers again.
					 */
					if (!conn->subscriber)
						rlock_conn_close(&srv->sub,
										 "the command connection stopped getting answers",
										 false);
				}
			}
			else if (keepalive && !conn->subscriber &&
					 now >= rlock_conn_keepalive_at(conn))
				rlock_conn_ping(conn);
			break;
	}
}

void
rlock_conn_tick(TimestampTz now)
{
	rlock_conn_tick_one(&rlock_server->cmd, now);
	rlock_conn_tick_one(&rlock_server->sub, now);
}

static TimestampTz
rlock_conn_next_tick_one(RlockConn *conn)
{
	switch (conn->state)
	{
		case RLOCK_CONN_DOWN:
			return conn->retry_at;
		case RLOCK_CONN_RESOLVING:
		case RLOCK_CONN_CONNECTING:
		case RLOCK_CONN_HANDSHAKE:
			return conn->deadline;
		case RLOCK_CONN_READY:
			if (!dlist_is_empty(&conn->inflight))
				return TimestampTzPlusMilliseconds(dlist_head_element(RlockCmd, node, &conn->inflight)->sent_at,
												   rlock_command_timeout);
			if (keepalive && !conn->subscriber)
				return rlock_conn_keepalive_at(conn);
			break;
	}
	return DT_NOEND;
}

/*
 * When rlock_conn_tick() next has something to do.
 */
TimestampTz
rlock_conn_next_tick(void)
{
	if (rlock_server->cmd.failed || rlock_server->sub.failed)
		return 0;
	return Min(rlock_conn_next_tick_one(&rlock_server->cmd),
			   rlock_conn_next_tick_one(&rlock_server->sub));
}

/*
 * Write what the connections have queued, now: one write per connection
 * for everything queued since the last wake-up.
 */
void
rlock_conn_flush(void)
{
	RlockConn  *conns[2] = {&rlock_server->cmd, &rlock_server->sub};
	int			i;

	for (i = 0; i < 2; i++)
	{
		RlockConn  *conn = conns[i];

		if (conn->ac != NULL && conn->state >= RLOCK_CONN_HANDSHAKE &&
			(conn->want & WL_SOCKET_WRITEABLE))
			redisAsyncHandleWrite(conn->ac);
	}
}

static void
rlock_wait_set_build(void)
{
	RlockConn  *conns[2] = {&rlock_server->cmd, &rlock_server->sub};
	int			i;

	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	wait_set = CreateWaitEventSet(TopMemoryContext, 4);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
					  NULL, NULL);
	for (i = 0; i < 2; i++)
	{
		RlockConn  *conn = conns[i];

		conn->pos = -1;
		if (conn->ac == NULL)
			continue;
		conn->registered = conn->want ? conn->want : WL_SOCKET_READABLE;
		conn->pos = AddWaitEventToSet(wait_set, conn->registered,
									  conn->ac->c.fd, NULL, conn);
	}
	wait_set_stale = false;
}

/*
 * Sleep until the latch is set, a socket is ready or timeout_ms passes
 * (-1: no timeout), then let hiredis read and write what is ready.
 */
void
rlock_conn_wait(long timeout_ms)
{
	RlockConn  *conns[2] = {&rlock_server->cmd, &rlock_server->sub};
	WaitEvent	events[4];
	int			nevents;
	int			i;

	if (wait_set_stale)
		rlock_wait_set_build();
	for (i = 0; i < 2; i++)
	{
		RlockConn  *conn = conns[i];

		if (conn->pos >= 0 && conn->want != 0 &&
			conn->want != conn->registered)
		{
			ModifyWaitEvent(wait_set, conn->pos, conn->want, NULL);
			conn->registered = conn->want;
		}
	}

	nevents = WaitEventSetWait(wait_set, timeout_ms, events, lengthof(events),
							   PG_WAIT_EXTENSION);
	for (i = 0; i < nevents; i++)
	{
		RlockConn  *conn = (RlockConn *) events[i].user_data;

		if (events[i].events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			continue;
		}
		if (conn == NULL || conn->ac == NULL || conn->pos != events[i].pos)
			continue;
		if (events[i].events & WL_SOCKET_READABLE)
			redisAsyncHandleRead(conn->ac);
		if (conn->ac != NULL && (events[i].events & WL_SOCKET_WRITEABLE))
			redisAsyncHandleWrite(conn->ac);
	}
}
