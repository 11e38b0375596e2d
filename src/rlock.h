/*-------------------------------------------------------------------------
 *
 * rlock.h
 *		What every part of rlock needs: its settings and a few sizes.
 *
 * rlock gives SQL sessions distributed locks stored in Redis, laid out the
 * way Redisson lays out its RLock.  Backends never talk to Redis: they hand
 * requests to one background worker per instance through shared memory
 * (src/shared), and the worker alone holds the connections (src/redis).
 * src/README.md says which folder runs in which process.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/rlock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_H
#define RLOCK_H

/* Length of a canonical textual UUID, without the terminator */
#define RLOCK_UUID_LEN		36

/* Redis names a server process by 40 hex digits (INFO server, run_id) */
#define RLOCK_RUN_ID_LEN	40

/* Room for an error text handed from the worker to a backend */
#define RLOCK_DETAIL_LEN	512

/* Room for a server address in messages: host (NI_MAXHOST) and port */
#define RLOCK_ADDRESS_LEN	(1025 + 16)

/*
 * The longest lease and the longest bounded wait a caller may ask for:
 * every time computed from them (now + lease, now + wait, in microseconds
 * or milliseconds) stays far from overflowing.
 */
#define RLOCK_MAX_DURATION_DAYS	365
#define RLOCK_MAX_DURATION_US	(INT64CONST(86400000000) * RLOCK_MAX_DURATION_DAYS)

/*
 * The largest timeouts and margin (one hour) and watchdog lease (one day)
 * the settings take: sums of two of them and a grace stay far from
 * INT_MAX ms.
 */
#define RLOCK_MAX_TIMEOUT_MS	(3600 * 1000)
#define RLOCK_MAX_WATCHDOG_MS	(24 * 3600 * 1000)

/*
 * Settings (rlock.c).  The worker reads the connection settings; backends
 * read the limits and the timeouts that bound their own waits.
 */
extern char *rlock_host;
extern int	rlock_port;
extern char *rlock_unix_socket;
extern int	rlock_database;
extern char *rlock_username;
extern char *rlock_password_file;
extern char *rlock_key_prefix;
extern char *rlock_instance_name;
extern int	rlock_connect_timeout;
extern int	rlock_command_timeout;
extern int	rlock_watchdog_timeout;
extern int	rlock_handoff_limit;
extern int	rlock_fair_wait_timeout;
extern int	rlock_max_key_length;
extern int	rlock_max_locks;
extern int	rlock_max_locks_per_session;
extern int	rlock_superuser_reserved_locks;
extern int	rlock_verify_at_commit;

/* rlock.verify_at_commit */
typedef enum RlockVerify
{
	RLOCK_VERIFY_OFF,
	RLOCK_VERIFY_LEASE,			/* ask Redis unless its last word covers it */
	RLOCK_VERIFY_ON				/* ask Redis at every commit */
} RlockVerify;
extern int	rlock_verify_margin;

/* rlock.deadlock_detection */
typedef enum RlockDeadlockDetection
{
	RLOCK_DEADLOCK_OFF,
	RLOCK_DEADLOCK_LOCAL,		/* cycles among this instance's sessions */
	RLOCK_DEADLOCK_GLOBAL		/* and across the instances of a Redis */
} RlockDeadlockDetection;
extern int	rlock_deadlock_detection;
extern bool rlock_client_tracking;
extern int	rlock_verify_window;

/* rlock.tls: as libpq's sslmode */
typedef enum RlockTls
{
	RLOCK_TLS_OFF,
	RLOCK_TLS_REQUIRE,			/* encrypt, check nothing */
	RLOCK_TLS_VERIFY_CA,		/* a trusted CA signed the certificate */
	RLOCK_TLS_VERIFY_FULL		/* and it names the server */
} RlockTls;
extern int	rlock_tls;
extern char *rlock_tls_ca_file;
extern char *rlock_tls_cert_file;
extern char *rlock_tls_key_file;
extern char *rlock_tls_server_name;

/* rlock.topology: how rlock finds the Redis primary */
typedef enum RlockTopology
{
	RLOCK_TOPOLOGY_STANDALONE,	/* rlock.host and rlock.port name it */
	RLOCK_TOPOLOGY_SENTINEL,	/* Redis Sentinels at rlock.nodes name it */
	RLOCK_TOPOLOGY_CLUSTER		/* a Redis Cluster: rlock.nodes are seeds */
} RlockTopology;
extern int	rlock_topology;
extern char *rlock_nodes;

/* rlock.cluster_pubsub: the pub/sub namespace of unlock messages in a
 * Redis Cluster */
typedef enum RlockClusterPubsub
{
	RLOCK_CLUSTER_PUBSUB_AUTO,	/* sharded if the cluster knows it, as
								 * Redisson decides */
	RLOCK_CLUSTER_PUBSUB_SHARDED,
	RLOCK_CLUSTER_PUBSUB_CLASSIC,
	RLOCK_CLUSTER_PUBSUB_BOTH	/* a fleet with both kinds of clients */
} RlockClusterPubsub;
extern int	rlock_cluster_pubsub;
extern char *rlock_sentinel_master;
extern char *rlock_sentinel_username;
extern char *rlock_sentinel_password_file;
extern int	rlock_sentinel_tls;

/*
 * rlock.sync_replicas: how many replicas must confirm an acquisition
 * (WAIT) before it counts; RLOCK_SYNC_AUTO asks every replica the primary
 * reports connected and needs one of them, as Redisson does.
 */
#define RLOCK_SYNC_OFF		0
#define RLOCK_SYNC_AUTO		(-1)
#define RLOCK_SYNC_MAX		64
extern int	rlock_sync_replicas;
extern int	rlock_sync_timeout;
extern int	rlock_failover_timeout;

/* Most nodes rlock.nodes may list */
#define RLOCK_MAX_NODES		16

/* One entry of rlock.nodes */
typedef struct RlockNodeAddr
{
	char		host[256];
	int			port;
} RlockNodeAddr;

/* shared/nodes.c */
extern int	rlock_parse_nodes(const char *list, RlockNodeAddr *nodes,
							  int max, char *error, size_t errorlen);
extern void rlock_format_address(char *buf, size_t size, const char *host,
								 int port);

#endif							/* RLOCK_H */
