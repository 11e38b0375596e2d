/*-------------------------------------------------------------------------
 *
 * transport.c
 *		Sockets: name resolution, a non-blocking connect, and the plain
 *		transport that moves bytes over TCP or a Unix socket.
 *
 * Every socket is non-blocking and sits in the worker's WaitEventSet; no
 * call here waits.  A host name that is not a numeric address is resolved
 * with getaddrinfo_a(), which signals completion with SIGUSR2, so the
 * worker never blocks on DNS either; numeric addresses are converted
 * without a lookup.  TCP sockets get TCP_NODELAY (commands are written
 * whole, and waiting to merge them would only add latency) and keepalive
 * probes, so that a peer that vanished without a word is found even when
 * nothing is sent.
 *
 * Each socket is counted against the server's file descriptor budget
 * (AcquireExternalFD: a third of the descriptors max_files_per_process
 * leaves free), as libpq connections made by a backend are.  When none
 * is left, the caller is asked to free one (conn.c closes the idle
 * connection of a Redis Cluster primary that was used least recently).
 * Bytes move with read(2) and write(2) (background workers ignore
 * SIGPIPE, so a write to a closed peer fails with EPIPE), which also
 * lets /proc/<pid>/io count them.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/transport.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/latch.h"

#include "redis/redis_int.h"

/* TCP keepalive: first probe after this many idle seconds, then every
 * third of it, three times */
#define RLOCK_KEEPALIVE_IDLE_S	15

/*---- name resolution ----*/

/*
 * SIGUSR2 handler: getaddrinfo_a() finished.  Wake the main loop.
 */
static void
resolver_signal(SIGNAL_ARGS)
{
	int			save_errno = errno;

	SetLatch(MyLatch);
	errno = save_errno;
}

bool
rlock_is_numeric_host(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 ||
		inet_pton(AF_INET6, host, buf) == 1;
}

/*
 * Start resolving the server's host name in the background.
 */
void
rlock_resolve_start(RlockServer *srv)
{
	struct gaicb *list[1];
	struct sigevent sev;
	int			rc;

	if (srv->resolving)
		return;

	pqsignal(SIGUSR2, resolver_signal);
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
void
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
		/* the settings changed meanwhile: resolve the new name */
		if (rc == 0)
			freeaddrinfo(srv->gai.ar_result);
		rlock_resolve_start(srv);
		return;
	}
	if (rc != 0)
	{
		snprintf(srv->resolve_error, sizeof(srv->resolve_error),
				 "could not resolve \"%s\": %s", srv->host, gai_strerror(rc));
		return;
	}
	/* prefer an IPv4 address, as hiredis did */
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

/*---- sockets ----*/

/*
 * Fill "addr" with the server's address: its Unix socket, or the numeric
 * address of its host (resolved beforehand unless numeric already).
 */
static bool
socket_address(RlockConn *conn, struct sockaddr_storage *addr,
			   socklen_t *addrlen)
{
	RlockServer *srv = conn->server;
	struct addrinfo hints;
	struct addrinfo *ai;
	char		port[16];
	const char *host;
	int			rc;

	memset(addr, 0, sizeof(*addr));
	if (srv->unix_socket[0] != '\0')
	{
		struct sockaddr_un *un = (struct sockaddr_un *) addr;

		if (strlen(srv->unix_socket) >= sizeof(un->sun_path))
		{
			rlock_conn_set_error(conn, "Unix socket path \"%s\" is too long",
								 srv->unix_socket);
			return false;
		}
		un->sun_family = AF_UNIX;
		strlcpy(un->sun_path, srv->unix_socket, sizeof(un->sun_path));
		*addrlen = sizeof(struct sockaddr_un);
		return true;
	}

	host = rlock_is_numeric_host(srv->host) ? srv->host : srv->resolved;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%d", srv->port);
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0)
	{
		rlock_conn_set_error(conn, "invalid address \"%s\": %s", host,
							 gai_strerror(rc));
		return false;
	}
	memcpy(addr, ai->ai_addr, ai->ai_addrlen);
	*addrlen = ai->ai_addrlen;
	freeaddrinfo(ai);
	return true;
}

/*
 * Options of a new TCP socket: no Nagle delay, keepalive probes.  Failures
 * are not fatal: the socket works without them.
 */
static void
socket_tcp_options(pgsocket sock)
{
	int			on = 1;
	int			idle = RLOCK_KEEPALIVE_IDLE_S;
	int			interval = RLOCK_KEEPALIVE_IDLE_S / 3;
	int			count = 3;

	(void) setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	(void) setsockopt(sock, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	(void) setsockopt(sock, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	(void) setsockopt(sock, IPPROTO_TCP, TCP_KEEPINTVL, &interval,
					  sizeof(interval));
	(void) setsockopt(sock, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

/*
 * Create a non-blocking socket and start connecting it.  False (with the
 * reason in conn->error) if that failed at once.  When no descriptor is
 * left, "reclaim" is asked to free one, and says whether it did.
 */
bool
rlock_socket_open(RlockConn *conn, bool (*reclaim) (RlockConn *asking))
{
	struct sockaddr_storage addr;
	socklen_t	addrlen;
	pgsocket	sock;

	if (!socket_address(conn, &addr, &addrlen))
		return false;
	if (!AcquireExternalFD() &&
		!(reclaim(conn) && AcquireExternalFD()))
	{
		rlock_conn_set_error(conn,
							 "no file descriptor left for a socket: the connections rlock may hold open (%d, a third of what max_files_per_process leaves free) are all in use",
							 max_safe_fds / 3);
		return false;
	}
	sock = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
				  0);
	if (sock == PGINVALID_SOCKET)
	{
		rlock_conn_set_error(conn, "could not create socket: %m");
		ReleaseExternalFD();
		return false;
	}
	conn->sock = sock;
	if (addr.ss_family != AF_UNIX)
		socket_tcp_options(sock);
	if (connect(sock, (struct sockaddr *) &addr, addrlen) < 0 &&
		errno != EINPROGRESS && errno != EINTR)
	{
		rlock_conn_set_error(conn, "could not connect: %m");
		return false;
	}
	return true;
}

/*
 * The socket became writeable while connecting: did the connect work?
 */
bool
rlock_socket_connected(RlockConn *conn)
{
	int			err = 0;
	socklen_t	len = sizeof(err);

	if (getsockopt(conn->sock, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == 0)
		return true;
	errno = err;
	rlock_conn_set_error(conn, "could not connect: %m");
	return false;
}

void
rlock_socket_close(RlockConn *conn)
{
	if (conn->sock == PGINVALID_SOCKET)
		return;
	close(conn->sock);
	ReleaseExternalFD();
	conn->sock = PGINVALID_SOCKET;
}

/*---- the plain transport ----*/

static RlockOpen
plain_open(RlockConn *conn)
{
	return RLOCK_OPEN_DONE;
}

static ssize_t
plain_read(RlockConn *conn, char *buf, size_t len)
{
	ssize_t		n = read(conn->sock, buf, len);

	if (n > 0)
		return n;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
	{
		conn->io_want = WL_SOCKET_READABLE;
		return 0;
	}

	/*
	 * A server that closes a new connection before answering anything is
	 * most likely a TLS port refusing plain text.
	 */
	if (rlock_conn_unanswered(conn) && (n == 0 || errno == ECONNRESET))
		rlock_conn_set_error(conn,
							 "server closed the connection before answering (if it requires TLS, set rlock.tls)");
	else if (n == 0)
		rlock_conn_set_error(conn, "server closed the connection");
	else
		rlock_conn_set_error(conn, "could not read from the server: %m");
	return -1;
}

static ssize_t
plain_write(RlockConn *conn, const char *buf, size_t len)
{
	ssize_t		n = write(conn->sock, buf, len);

	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
	{
		conn->io_want = WL_SOCKET_WRITEABLE;
		return 0;
	}
	rlock_conn_set_error(conn, "could not write to the server: %m");
	return -1;
}

static bool
plain_pending(RlockConn *conn)
{
	return false;
}

static void
plain_close(RlockConn *conn)
{
}

const RlockTransport rlock_transport_plain = {
	plain_open,
	plain_read,
	plain_write,
	plain_pending,
	plain_close
};
