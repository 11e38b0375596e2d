/*-------------------------------------------------------------------------
 *
 * handshake.c
 *		What a new connection says before it takes commands, and the few
 *		commands the Redis layer sends on its own behalf.
 *
 * conn.c hands every connection whose transport is open to
 * rlock_handshake_begin(), registered when the worker starts, and this
 * file hands it back with rlock_conn_became_ready() once every step was
 * answered.
 *
 * The handshake: AUTH (when a user or a password file is set), SELECT
 * (command and sync connections, database other than 0), CLIENT SETNAME;
 * on the command and sync connections INFO server, ROLE (INFO replication
 * when ROLE is refused), CLIENT ID and SCRIPT LOAD of every registered
 * script, and from the INFO reply the fence against the previous
 * connection (CLIENT KILL ID); on a Sentinel's connections and a Redis
 * Cluster's map connection, PING.  They are pipelined; the connection is
 * READY when the last of them is answered.  AUTH, SELECT, SCRIPT LOAD and
 * PING must work; an ACL may refuse the others, and rlock then does
 * without what they give (doc/configuration.md, "Redis ACL", lists them
 * and what each gives).  A server that cannot keep locks (a replica by
 * ROLE, a Cluster node or a Sentinel by INFO's redis_mode) fails the
 * handshake (handshake_refuse_server).
 *
 * The password is the first line of the password file (rlock.password_file,
 * or rlock.sentinel_password_file for a Sentinel), read for each new
 * connection.  As libpq does with a .pgpass file, a file that is not a
 * regular file or that others may read is not used: here the connection
 * fails with the reason; the file is opened without blocking, so that a
 * FIFO never holds the worker.  A line longer than the buffer, or one
 * holding a NUL byte, is an error too, never a password cut short.
 * Messages name the setting, never the path
 * (only superusers may see it) nor the password.
 *
 * Each new command connection first closes the previous one on the
 * server side, so that a command still in the network when the worker
 * gave up on it cannot run after the commands that restate the counts
 * (see handshake_fence).
 *
 * After the handshake the layer sends PING on an idle command connection
 * while the worker has waiters, ROLE now and then (rlock_handshake_role),
 * and SCRIPT LOAD again when a script went missing (rlock_scripts_reload).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/handshake.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/redis_int.h"

/* Load the scripts again at most this often on one connection */
#define RLOCK_RELOAD_INTERVAL_MS	1000

/* Room for the password: at most one byte less */
#define RLOCK_PASSWORD_SIZE		1024

typedef enum HandshakeStep
{
	STEP_AUTH,
	STEP_SELECT,
	STEP_SETNAME,
	STEP_INFO,					/* version and run_id of the server */
	STEP_CLIENT_ID,				/* this connection's id, for the next fence */
	STEP_REDIRECT_ID,			/* a subscriber's id, for CLIENT TRACKING
								 * ... REDIRECT on the command connection */
	STEP_FENCE,					/* CLIENT KILL ID of the previous one */
	STEP_SCRIPT_LOAD,
	STEP_ROLE,
	STEP_INFO_REPLICATION,		/* ROLE refused: the role and replicas */
	STEP_PING
} HandshakeStep;

typedef struct HandshakeCmd
{
	RlockCmd	cmd;
	HandshakeStep step;
	int			script;			/* STEP_SCRIPT_LOAD */
	bool		counted;		/* READY waits for its reply */
} HandshakeCmd;

/* CLIENT SETNAME of each kind of connection, by RlockConnUse */
static const char *const handshake_client_names[RLOCK_NUSES] = {
	"rlock_command", "rlock_subscriber", "rlock_sync", "rlock_sentinel",
	"rlock_sentinel_watch", "rlock_cluster"
};

static MemoryContext handshake_cxt = NULL;
static RlockArgs *handshake_args = NULL;

static void handshake_reply(RlockConn *conn, RlockCmd *cmd,
							const RlockReply *reply);

/*
 * Queue one of our own commands, built in handshake_args.  Steps sent
 * during the handshake are counted: the connection is READY when the
 * last of them is answered.
 */
static bool
handshake_send(RlockConn *conn, HandshakeStep step, RlockShape shape,
			   int script)
{
	HandshakeCmd *hc;

	if (handshake_cxt == NULL)
		handshake_cxt = SlabContextCreate(rlock_redis_context,
										  "rlock handshake commands",
										  SLAB_DEFAULT_BLOCK_SIZE,
										  sizeof(HandshakeCmd));
	hc = MemoryContextAllocZero(handshake_cxt, sizeof(HandshakeCmd));
	hc->cmd.done = handshake_reply;
	hc->cmd.shape = shape;
	hc->cmd.internal = true;
	hc->step = step;
	hc->script = script;
	hc->counted = (conn->state == RLOCK_CONN_HANDSHAKE);
	if (!rlock_conn_send(conn, &hc->cmd, handshake_args))
	{
		pfree(hc);
		return false;
	}
	if (hc->counted)
		conn->handshake++;
	return true;
}

/*
 * Start building a command of our own.
 */
static RlockArgs *
handshake_args_reset(void)
{
	if (handshake_args == NULL)
		handshake_args = rlock_args_create(rlock_redis_context);
	rlock_args_reset(handshake_args);
	return handshake_args;
}

/*
 * Queue SCRIPT LOAD of every registered script.
 */
static void
handshake_load_scripts(RlockConn *conn)
{
	int			i;

	for (i = 0; i < rlock_scripts_count(); i++)
	{
		RlockArgs  *args = handshake_args_reset();

		rlock_args_cstr(args, "SCRIPT");
		rlock_args_cstr(args, "LOAD");
		rlock_args_cstr(args, rlock_script_text(i));
		handshake_send(conn, STEP_SCRIPT_LOAD, RLOCK_SHAPE_STRING, i);
	}
	conn->scripts_seq = conn->sends;
}

/*
 * Redis answered "cmd" with NOSCRIPT: may its sender send it again at
 * once?  Yes if the scripts were loaded on this connection after "cmd"
 * went out (a resend follows the loads), or if they are loaded now.  No,
 * and the sender retries later or gives up, if the connection is not
 * ready or they were loaded again less than a second ago, before "cmd":
 * a server that keeps forgetting them must not make this a loop.  The
 * handshake's load does not count: a SCRIPT FLUSH right after a
 * connection was made is answered like any other.
 */
bool
rlock_scripts_reload(RlockConn *conn, const RlockCmd *cmd)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!rlock_conn_ready(conn))
		return false;
	if (conn->scripts_seq > cmd->send_seq)
		return true;
	if (conn->scripts_loaded_at != 0 &&
		now < TimestampTzPlusMilliseconds(conn->scripts_loaded_at,
										  RLOCK_RELOAD_INTERVAL_MS))
		return false;
	conn->scripts_loaded_at = now;	/* the handshake's load does not count */
	handshake_load_scripts(conn);
	return true;
}

/*
 * The setting that names the password file of "conn"'s server, for
 * messages: they reach every user, and only superusers may see the path.
 */
static const char *
handshake_password_setting(RlockConn *conn)
{
	return (conn->use == RLOCK_USE_SENTINEL || conn->use == RLOCK_USE_WATCH) ?
		"rlock.sentinel_password_file" : "rlock.password_file";
}

/*
 * May the password file be used?  As libpq asks of a .pgpass file: a
 * regular file without group or world access.  libpq ignores such a file
 * with a warning; rlock refuses it, which fails the connection with the
 * reason (an AUTH without the password would fail anyway, less clearly).
 * fstat() looks at the file that was opened, whatever a symbolic link
 * pointed at, or what the path names by now.
 */
static bool
handshake_check_password_file(RlockConn *conn, int fd)
{
	struct stat st;
	const char *setting = handshake_password_setting(conn);

	if (fstat(fd, &st) != 0)
	{
		rlock_conn_set_error(conn,
							 "could not read the password file (%s): %m",
							 setting);
		return false;
	}
	if (!S_ISREG(st.st_mode))
	{
		rlock_conn_set_error(conn,
							 "the password file (%s) is not a regular file",
							 setting);
		return false;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO))
	{
		rlock_conn_set_error(conn,
							 "the password file (%s) has group or world access; it must be u=rw (0600) or less",
							 setting);
		return false;
	}
	return true;
}

/*
 * Read up to "size" bytes of an open file: fewer only at its end.  -1 on
 * an error.
 */
static ssize_t
handshake_read_start(int fd, char *buf, size_t size)
{
	size_t		got = 0;

	while (got < size)
	{
		ssize_t		n = read(fd, buf + got, size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += n;
	}
	return (ssize_t) got;
}

/*
 * Read the first line of an open password file into password (size
 * bytes, the line's end, LF or CRLF, left out).  A line that does not
 * fit, or that holds a NUL byte, is an error, never a password cut
 * short.  Reading size + 1 bytes tells: the longest line that fits ends
 * with CRLF right there.
 */
static bool
handshake_read_line(RlockConn *conn, int fd, char *password, size_t size)
{
	const char *setting = handshake_password_setting(conn);
	char		buf[RLOCK_PASSWORD_SIZE + 1];
	ssize_t		n;
	char	   *end;
	size_t		len;
	bool		ok = true;

	Assert(size == RLOCK_PASSWORD_SIZE);
	n = handshake_read_start(fd, buf, sizeof(buf));
	if (n < 0)
	{
		rlock_conn_set_error(conn,
							 "could not read the password file (%s): %m",
							 setting);
		return false;
	}
	if (n == 0)
	{
		rlock_conn_set_error(conn, "the password file (%s) is empty",
							 setting);
		return false;
	}
	end = memchr(buf, '\n', n);
	len = (end != NULL) ? (size_t) (end - buf) : (size_t) n;
	if (len > 0 && buf[len - 1] == '\r')
		len--;
	if (len > size - 1)
	{
		rlock_conn_set_error(conn,
							 "the password in the password file (%s) is longer than %d bytes",
							 setting, (int) size - 1);
		ok = false;
	}
	else if (memchr(buf, '\0', len) != NULL)
	{
		rlock_conn_set_error(conn,
							 "the password in the password file (%s) holds a NUL byte",
							 setting);
		ok = false;
	}
	else
	{
		memcpy(password, buf, len);
		password[len] = '\0';
	}
	explicit_bzero(buf, sizeof(buf));
	return ok;
}

/*
 * Read the password file: its first line.  False, with the reason in
 * conn->error, if it cannot be read or must not be used.
 *
 * Opening a FIFO would block the worker until a writer came: the file is
 * opened without blocking, and what was opened is looked at before a
 * byte is read.  Looking at the path first would leave a moment in which
 * the file could be swapped for a FIFO.
 */
static bool
handshake_read_password(RlockConn *conn, char *password, size_t size)
{
	int			fd;
	bool		ok;

	fd = OpenTransientFile(conn->server->password_file,
						   O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
	{
		rlock_conn_set_error(conn,
							 "could not read the password file (%s): %m",
							 handshake_password_setting(conn));
		return false;
	}
	ok = handshake_check_password_file(conn, fd) &&
		handshake_read_line(conn, fd, password, size);
	CloseTransientFile(fd);
	return ok;
}

/*
 * The connection is open (and encrypted, with TLS): queue the handshake.
 */
void
rlock_handshake_begin(RlockConn *conn)
{
	RlockServer *srv = conn->server;
	RlockArgs  *args;
	char		password[RLOCK_PASSWORD_SIZE];
	bool		have_password = false;

	if (srv->password_file[0] != '\0')
	{
		if (!handshake_read_password(conn, password, sizeof(password)))
		{
			rlock_conn_give_up(conn, NULL);
			return;
		}
		have_password = true;
	}

	if (srv->username[0] != '\0' || have_password)
	{
		args = handshake_args_reset();
		rlock_args_cstr(args, "AUTH");
		if (srv->username[0] != '\0')
			rlock_args_cstr(args, srv->username);
		rlock_args_cstr(args, have_password ? password : "");
		handshake_send(conn, STEP_AUTH, RLOCK_SHAPE_OK, 0);
		explicit_bzero(password, sizeof(password));
		/* and the builder's copy (the bytes on their way out stay in the
		 * connection's memory until it is reset) */
		explicit_bzero(args->buf.data, args->buf.len);
	}

	if (conn->node != NULL && srv->database != 0)
	{
		rlock_conn_give_up(conn,
						   "a Redis Cluster has database 0 only: set rlock.database to 0");
		return;
	}
	if ((conn->use == RLOCK_USE_COMMAND || conn->use == RLOCK_USE_SYNC) &&
		srv->database != 0)
	{
		args = handshake_args_reset();
		rlock_args_cstr(args, "SELECT");
		rlock_args_int(args, srv->database);
		handshake_send(conn, STEP_SELECT, RLOCK_SHAPE_OK, 0);
	}

	args = handshake_args_reset();
	rlock_args_cstr(args, "CLIENT");
	rlock_args_cstr(args, "SETNAME");
	rlock_args_cstr(args, handshake_client_names[conn->use]);
	handshake_send(conn, STEP_SETNAME, RLOCK_SHAPE_OK, 0);

	/* a Sentinel must answer (a wrong password fails here) */
	if (conn->use == RLOCK_USE_SENTINEL || conn->use == RLOCK_USE_WATCH ||
		conn->use == RLOCK_USE_CLUSTER)
	{
		args = handshake_args_reset();
		rlock_args_cstr(args, "PING");
		handshake_send(conn, STEP_PING, RLOCK_SHAPE_PONG, 0);
	}

	if (conn->use == RLOCK_USE_COMMAND || conn->use == RLOCK_USE_SYNC)
	{
		conn->run_id[0] = '\0';
		conn->client_id = 0;
		if (conn->use == RLOCK_USE_COMMAND)
			rlock_redis_status_server("", NULL);
		args = handshake_args_reset();
		rlock_args_cstr(args, "INFO");
		rlock_args_cstr(args, "server");
		handshake_send(conn, STEP_INFO, RLOCK_SHAPE_STRING, 0);
		/* a replica would refuse every lock: the role decides first */
		if (conn->use == RLOCK_USE_COMMAND)
			rlock_redis_status_server(NULL, "");
		rlock_handshake_role(conn);
		args = handshake_args_reset();
		rlock_args_cstr(args, "CLIENT");
		rlock_args_cstr(args, "ID");
		handshake_send(conn, STEP_CLIENT_ID, RLOCK_SHAPE_INTEGER, 0);
		handshake_load_scripts(conn);
	}

	/* before any SUBSCRIBE, which allows no CLIENT ID after it */
	if (conn->use == RLOCK_USE_SUBSCRIBER)
	{
		conn->client_id = 0;
		args = handshake_args_reset();
		rlock_args_cstr(args, "CLIENT");
		rlock_args_cstr(args, "ID");
		handshake_send(conn, STEP_REDIRECT_ID, RLOCK_SHAPE_INTEGER, 0);
	}
}

/*
 * A server rlock cannot keep locks on: a Redis Cluster node (keys of other
 * slots are answered MOVED), a Sentinel (no data at all), a replica
 * (every write refused).  The connection is given up with the reason,
 * which requests and rlock_status() show, and made again with back-off:
 * a failover may turn the server into a primary.
 */
static void
handshake_refuse_server(RlockConn *conn, const char *mode, const char *role)
{
	const char *why = NULL;

	bool		sentinel = rlock_sentinel_active();

	if (mode != NULL && conn->node != NULL)
	{
		if (strcmp(mode, "cluster") != 0)
			why = "the server the Redis Cluster's slot map names is not in cluster mode";
	}
	else if (mode != NULL && strcmp(mode, "cluster") == 0)
		why = "the server runs in cluster mode: set rlock.topology to cluster, with the node in rlock.nodes";
	else if (mode != NULL && strcmp(mode, "sentinel") == 0)
		why = sentinel ?
			"the Sentinels named a Redis Sentinel as the primary" :
			"the server is a Redis Sentinel, not a Redis server: point rlock.host at the primary it monitors, or set rlock.topology to sentinel";
	else if (role != NULL && strcmp(role, "slave") == 0)
		why = conn->node != NULL ?
			"the node is a replica now, not a primary of the Redis Cluster (a failover is under way)" :
			sentinel ?
			"the server the Sentinels named is a replica now, not the primary (a failover is under way)" :
			"the server is a read-only replica: point rlock.host at the primary";
	else if (role != NULL)
		why = "the server answered ROLE with no primary's role (\"master\" and its replicas)";
	if (why != NULL)
	{
		rlock_redis_status_error(why);
		rlock_conn_give_up(conn, why);
		/* a demoted primary is left at once; the Sentinels know better */
		if (sentinel)
			rlock_sentinel_recheck();
		if (conn->node != NULL)
			rlock_router_refresh_soon();
	}
}

/*
 * Check an idle command connection: a server that stopped answering is
 * then found by the command deadline.
 */
void
rlock_handshake_role(RlockConn *conn)
{
	RlockArgs  *args = handshake_args_reset();

	rlock_args_cstr(args, "ROLE");
	conn->role_at = GetCurrentTimestamp();
	conn->role_inflight = handshake_send(conn, STEP_ROLE, RLOCK_SHAPE_ARRAY,
										 0);
}

void
rlock_handshake_ping(RlockConn *conn)
{
	RlockArgs  *args = handshake_args_reset();

	rlock_args_cstr(args, "PING");
	handshake_send(conn, STEP_PING, RLOCK_SHAPE_PONG, 0);
}

/*
 * Pull "name:value" out of an INFO reply into buf.  False if absent.
 */
static bool
handshake_info_field(const char *info, const char *name, char *buf,
					 size_t size)
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
 * The server's version as rlock_status() shows it: Valkey keeps
 * redis_version at the Redis release it forked from (7.2.4) and gives its
 * own in valkey_version, shown as "valkey 8.1.1".
 */
static bool
handshake_info_version(const char *info, char *buf, size_t size)
{
	char		valkey[24];

	if (handshake_info_field(info, "valkey_version", valkey, sizeof(valkey)))
	{
		snprintf(buf, size, "valkey %s", valkey);
		return true;
	}
	return handshake_info_field(info, "redis_version", buf, size);
}

/*
 * Does the server hold back the invalidations a command's own writes
 * cause until the command is done (Redis 7.0 and later, every Valkey)?
 * Older ones send them as the write happens, before anything the command
 * publishes after it, where worker/track.c's marks cannot tell them apart
 * from later changes.
 */
static bool
handshake_defers(const char *info)
{
	char		version[24];

	if (handshake_info_field(info, "valkey_version", version, sizeof(version)))
		return true;
	if (!handshake_info_field(info, "redis_version", version, sizeof(version)))
		return false;
	return strtol(version, NULL, 10) >= 7;
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
handshake_fence(RlockConn *conn)
{
	RlockArgs  *args;
	int64		previous;
	bool		same_server;

	if (conn->node != NULL)
	{
		/* each primary of a cluster has its own; this worker's only */
		previous = conn->fence_id;
		same_server = (conn->run_id[0] != '\0' &&
					   strcmp(conn->fence_run_id, conn->run_id) == 0);
	}
	else
	{
		SpinLockAcquire(&rlock_shared->mutex);
		previous = (conn->use == RLOCK_USE_SYNC) ?
			rlock_shared->sync_client_id : rlock_shared->cmd_client_id;
		same_server = (conn->run_id[0] != '\0' &&
					   strcmp(conn->use == RLOCK_USE_SYNC ?
							  rlock_shared->sync_run_id :
							  rlock_shared->cmd_run_id, conn->run_id) == 0);
		SpinLockRelease(&rlock_shared->mutex);
	}

	if (previous <= 0 || !same_server)
		return;
	args = handshake_args_reset();
	rlock_args_cstr(args, "CLIENT");
	rlock_args_cstr(args, "KILL");
	rlock_args_cstr(args, "ID");
	rlock_args_int(args, previous);
	handshake_send(conn, STEP_FENCE, RLOCK_SHAPE_INTEGER, 0);
}

/*
 * The connection is READY, so its fence was answered: make its id, with
 * the server it belongs to, the one the next command connection fences.
 * Published any earlier, a connection that failed between its CLIENT ID
 * and the fence would leave the connection before it unfenced.
 */
static void
handshake_publish_id(RlockConn *conn)
{
	/* without the server's name the id cannot be used safely */
	int64		id = (conn->run_id[0] != '\0') ? conn->client_id : 0;

	if (conn->node != NULL)
	{
		conn->fence_id = id;
		strlcpy(conn->fence_run_id, conn->run_id, sizeof(conn->fence_run_id));
		return;
	}
	SpinLockAcquire(&rlock_shared->mutex);
	if (conn->use == RLOCK_USE_SYNC)
	{
		rlock_shared->sync_client_id = id;
		strlcpy(rlock_shared->sync_run_id, conn->run_id,
				sizeof(rlock_shared->sync_run_id));
	}
	else
	{
		rlock_shared->cmd_client_id = id;
		strlcpy(rlock_shared->cmd_run_id, conn->run_id,
				sizeof(rlock_shared->cmd_run_id));
	}
	SpinLockRelease(&rlock_shared->mutex);
}

/*
 * An ACL refused INFO, CLIENT ID or CLIENT KILL: say once what that costs.
 */
static void
handshake_warn_fence(RlockConn *conn, const RlockReply *reply)
{
	static bool fence_warned = false;

	if (fence_warned)
		return;
	fence_warned = true;
	ereport(LOG,
			(errmsg("rlock could not close its earlier connections to Redis at %s on the server side",
					conn->server->address),
			 errdetail_internal("%s", reply->str),
			 errhint("Allow the rlock user INFO, CLIENT ID and CLIENT KILL, or a command that was under way when a connection was given up may still run later.")));
}

/*
 * A primary's replicas are now known, or not: remember, and say when
 * that changed.
 */
static void
handshake_set_replicas(RlockConn *conn, int replicas, bool refused)
{
	if (conn->replicas != replicas || conn->replicas_refused != refused)
		rlock_redis_status_touch();
	conn->replicas = replicas;
	conn->replicas_refused = refused;
}

/*
 * ROLE: a replica is refused; a primary lists its connected replicas
 * (["master", offset, [[ip, port, offset], ...]]), which "auto" syncing
 * waits for.
 */
static void
handshake_role_reply(RlockConn *conn, const RlockReply *reply)
{
	const char *role = "";

	if (reply->elements > 0 &&
		reply->element[0]->type == RLOCK_REPLY_STRING)
		role = reply->element[0]->str;
	if (conn->use == RLOCK_USE_COMMAND)
		rlock_redis_status_server(NULL, role);
	if (strcmp(role, "master") == 0)
	{
		/*
		 * Redis lists the replicas third; a server that lists them
		 * elsewhere, or not at all, leaves their number unknown.
		 */
		int			replicas = -1;

		if (reply->elements >= 3 &&
			reply->element[2]->type == RLOCK_REPLY_ARRAY)
			replicas = reply->element[2]->elements;
		handshake_set_replicas(conn, replicas, false);
	}
	else
		handshake_refuse_server(conn, NULL, role);
}

/*
 * ROLE was refused (an ACL without it): ask INFO replication instead,
 * which Redisson reads for the same, for the role and the replicas.
 */
static void
handshake_role_refused(RlockConn *conn, const RlockReply *reply)
{
	RlockArgs  *args = handshake_args_reset();

	rlock_redis_status_sync_note(conn, reply->str, false);
	rlock_args_cstr(args, "INFO");
	rlock_args_cstr(args, "replication");
	conn->role_inflight = handshake_send(conn, STEP_INFO_REPLICATION,
										 RLOCK_SHAPE_STRING, 0);
}

/*
 * INFO replication, after ROLE was refused: the same gate and count,
 * from "role:" and "connected_slaves:".  Refused as well, the replicas
 * stay unknown, which rlock.sync_replicas = auto takes for none
 * (rlock_status() and the log say so).
 */
static void
handshake_info_replication_reply(RlockConn *conn, const RlockReply *reply)
{
	char		role[16];
	char		count[16];

	conn->role_inflight = false;
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		rlock_redis_status_sync_note(conn, reply->str, true);
		handshake_set_replicas(conn, -1, true);
		return;
	}
	if (!handshake_info_field(reply->str, "role", role, sizeof(role)))
		role[0] = '\0';
	if (conn->use == RLOCK_USE_COMMAND)
		rlock_redis_status_server(NULL, role);
	if (strcmp(role, "master") != 0)
	{
		/* INFO says "slave" where ROLE says it */
		handshake_refuse_server(conn, NULL, role);
		return;
	}
	if (handshake_info_field(reply->str, "connected_slaves", count,
							 sizeof(count)) &&
		strspn(count, "0123456789") == strlen(count) && strlen(count) > 0 &&
		strlen(count) < 6)
		handshake_set_replicas(conn, atoi(count), false);
	else
		handshake_set_replicas(conn, -1, false);
}

/*
 * The reply to a step whose failure does not fail the connection.
 */
static void
handshake_optional_reply(RlockConn *conn, HandshakeCmd *hc,
						 const RlockReply *reply)
{
	char		version[32];
	char		mode[16];

	if (hc->step == STEP_ROLE)
		conn->role_inflight = false;
	if (hc->step == STEP_INFO_REPLICATION)
	{
		handshake_info_replication_reply(conn, reply);
		return;
	}
	if (hc->step == STEP_ROLE && reply->type == RLOCK_REPLY_ERROR)
	{
		handshake_role_refused(conn, reply);
		return;
	}
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		/* without it, commits ask Redis (no tracking) */
		if (hc->step == STEP_CLIENT_ID || hc->step == STEP_REDIRECT_ID)
			conn->client_id = 0;
		if (hc->step == STEP_INFO || hc->step == STEP_CLIENT_ID ||
			hc->step == STEP_FENCE)
			handshake_warn_fence(conn, reply);
		return;
	}
	switch (hc->step)
	{
		case STEP_INFO:
			if (conn->use == RLOCK_USE_COMMAND &&
				handshake_info_version(reply->str, version, sizeof(version)))
				rlock_redis_status_server(version, NULL);
			conn->defers_invalidations = handshake_defers(reply->str);
			/* Valkey says server_mode where Redis says redis_mode */
			if (handshake_info_field(reply->str, "server_mode",
									 mode, sizeof(mode)) ||
				handshake_info_field(reply->str, "redis_mode",
									 mode, sizeof(mode)))
				handshake_refuse_server(conn, mode, NULL);
			if (!handshake_info_field(reply->str, "run_id", conn->run_id,
									  sizeof(conn->run_id)))
				conn->run_id[0] = '\0';
			handshake_fence(conn);
			break;
		case STEP_CLIENT_ID:
		case STEP_REDIRECT_ID:
			conn->client_id = reply->integer;
			break;
		case STEP_ROLE:
			handshake_role_reply(conn, reply);
			break;
		default:
			break;
	}
}

/*
 * The reply to a step that must work: AUTH, SELECT, SCRIPT LOAD, PING.
 * An error fails a connection still in its handshake.
 */
static void
handshake_required_reply(RlockConn *conn, HandshakeCmd *hc,
						 const RlockReply *reply)
{
	if (reply->type == RLOCK_REPLY_ERROR)
	{
		rlock_count(RLOCK_STAT_REDIS_ERRORS, 1);
		rlock_redis_status_error(reply->str);
		if (hc->counted)
			rlock_conn_give_up(conn, reply->str);
		return;
	}
	if (hc->step == STEP_SCRIPT_LOAD &&
		(reply->len != RLOCK_SHA1_HEX_LEN ||
		 memcmp(reply->str, rlock_script_sha(hc->script),
				RLOCK_SHA1_HEX_LEN) != 0))
	{
		char		detail[128];

		snprintf(detail, sizeof(detail),
				 "SCRIPT LOAD of the %s script answered with another SHA1",
				 rlock_script_name(hc->script));
		rlock_conn_violation(conn, RLOCK_VIOLATION_HANDSHAKE, detail);
	}
}

/*
 * The last step was answered: the connection takes commands.
 */
static void
handshake_done(RlockConn *conn)
{
	if (conn->use == RLOCK_USE_COMMAND || conn->use == RLOCK_USE_SYNC)
		handshake_publish_id(conn);
	rlock_conn_became_ready(conn);
}

static void
handshake_reply(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	HandshakeCmd *hc = (HandshakeCmd *) cmd;

	if (reply != NULL && !conn->failed)
	{
		switch (hc->step)
		{
			case STEP_AUTH:
			case STEP_SELECT:
			case STEP_SCRIPT_LOAD:
			case STEP_PING:
				handshake_required_reply(conn, hc, reply);
				break;
			default:
				handshake_optional_reply(conn, hc, reply);
				break;
		}
		Assert(!hc->counted || conn->handshake > 0);
		if (hc->counted && --conn->handshake == 0 && !conn->failed &&
			conn->state == RLOCK_CONN_HANDSHAKE)
			handshake_done(conn);
	}
	pfree(hc);
}
