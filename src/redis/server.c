/*-------------------------------------------------------------------------
 *
 * server.c
 *		A Redis server as the settings name it, and the memory of the Redis
 *		layer.
 *
 * A server (RlockServer) is what a connection is made to: a host and
 * port or a Unix socket, and the settings to connect with, copied from
 * rlock.* so that a reload can tell what changed.  The data node of a
 * standalone server comes from rlock.host; the primary the Sentinels
 * name, and each primary of a Redis Cluster, get their address later and
 * the rest from the same settings (the Sentinels have settings of their
 * own, sentinel.c).  Resolving a host name is the transport's
 * (transport.c).
 *
 * Everything the Redis layer keeps lives in rlock_redis_context, made
 * when the worker starts (topology.c) under TopMemoryContext; a
 * connection's buffers and replies have a context of their own below it.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/server.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "redis/redis_int.h"

MemoryContext rlock_redis_context = NULL;

char *
rlock_redis_strdup(const char *s)
{
	return MemoryContextStrdup(rlock_redis_context, s ? s : "");
}

/*
 * A data server: host and port as given (empty: named later), the rest
 * (user, password, database, TLS) from rlock.* as for a standalone server.
 */
void
rlock_server_configure(RlockServer *srv, const char *host, int port,
					   const char *unix_socket)
{
	srv->host = rlock_redis_strdup(host);
	srv->port = port;
	srv->unix_socket = rlock_redis_strdup(unix_socket);
	srv->database = rlock_database;
	srv->username = rlock_redis_strdup(rlock_username);
	srv->password_file = rlock_redis_strdup(rlock_password_file);
	srv->tls = rlock_tls;
	srv->tls_ca_file = rlock_redis_strdup(rlock_tls_ca_file);
	srv->tls_cert_file = rlock_redis_strdup(rlock_tls_cert_file);
	srv->tls_key_file = rlock_redis_strdup(rlock_tls_key_file);
	srv->tls_server_name = rlock_redis_strdup(rlock_tls_server_name);
	if (srv->unix_socket[0] != '\0')
		snprintf(srv->address, sizeof(srv->address), "unix:%s",
				 srv->unix_socket);
	else
		rlock_format_address(srv->address, sizeof(srv->address),
							 srv->host, srv->port);
	srv->resolved[0] = '\0';
	srv->resolve_error[0] = '\0';
	srv->resolve_stale = srv->resolving;
	srv->tls_unix_logged = false;
}

/*
 * A Redis Cluster node's server.
 */
void
rlock_server_configure_node(RlockServer *srv, const char *host, int port)
{
	rlock_server_configure(srv, host, port, "");
}

/*
 * Point a server at another address (a failover, the next seed).
 */
void
rlock_server_set_address(RlockServer *srv, const char *host, int port)
{
	pfree(srv->host);
	srv->host = rlock_redis_strdup(host);
	srv->port = port;
	srv->resolved[0] = '\0';
	/* a lookup of the old name still running is not used */
	srv->resolve_stale = srv->resolving;
	rlock_format_address(srv->address, sizeof(srv->address), host, port);
}

/*
 * Free what rlock_server_configure() (or sentinel.c for a Sentinel)
 * copied from the settings.
 */
void
rlock_server_forget(RlockServer *srv)
{
	pfree(srv->host);
	pfree(srv->unix_socket);
	pfree(srv->username);
	pfree(srv->password_file);
	pfree(srv->tls_ca_file);
	pfree(srv->tls_cert_file);
	pfree(srv->tls_key_file);
	pfree(srv->tls_server_name);
}
