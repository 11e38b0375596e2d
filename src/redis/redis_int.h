/*-------------------------------------------------------------------------
 *
 * redis_int.h
 *		What the files of the Redis layer share among themselves: the
 *		limits on replies, the reader, transports and the connection
 *		record.  Nothing outside src/redis includes this.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/redis_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_REDIS_INT_H
#define RLOCK_REDIS_INT_H

#include <arpa/inet.h>
#include <netdb.h>

#include "redis/redis.h"

/*
 * Limits on what Redis may send (doc/failures.md lists them).  Every
 * reply rlock expects fits far inside them; a reply that does not is
 * refused before it is allocated, and the connection is dropped.
 */
#define RLOCK_REPLY_MAX_STRING		(1024 * 1024)	/* bytes in one string */
#define RLOCK_REPLY_MAX_ELEMENTS	65536	/* elements of one array */
#define RLOCK_REPLY_MAX_DEPTH		4	/* arrays inside arrays */
#define RLOCK_REPLY_MAX_BYTES		(8 * 1024 * 1024)	/* memory of one reply */
#define RLOCK_REPLY_MAX_PENDING		(2 * 1024 * 1024)	/* bytes buffered
														 * without a complete
														 * reply */

/*
 * What the readers of all the worker's connections together may hold:
 * hiredis's buffers, replies being read and replies not yet handed over,
 * counted as the allocator holds them.  When a reader would take more,
 * the one holding the most has its reply refused and its connection is
 * dropped.  Two connections at their own limits (8 MiB of reply and a
 * buffer of up to 3 MiB each) fit; what rlock reads in normal operation
 * (a slot map of 512 primaries is about 1 MiB) stays far below.
 */
#define RLOCK_REPLY_BUDGET			(32 * 1024 * 1024)

/*
 * Commands are not queued on a connection while more than this is waiting
 * to be written (a Redis that stopped reading): their senders keep them
 * for later, as when there is no connection.
 */
#define RLOCK_OUT_MAX				(4 * 1024 * 1024)

/*---- args.c: a command in RESP ----*/

extern void rlock_args_format(const RlockArgs *args, StringInfo out);
extern bool rlock_args_wire_key(const char *wire, int wirelen,
								const char **key, int *keylen);

/*---- reply.c: reading replies within the limits ----*/

typedef enum RlockReaderFault
{
	RLOCK_READER_OK,
	RLOCK_READER_STRING,		/* a string over RLOCK_REPLY_MAX_STRING */
	RLOCK_READER_ELEMENTS,		/* an array over RLOCK_REPLY_MAX_ELEMENTS */
	RLOCK_READER_DEPTH,			/* arrays nested deeper than the limit */
	RLOCK_READER_BYTES,			/* a reply over RLOCK_REPLY_MAX_BYTES */
	RLOCK_READER_PENDING,		/* too many bytes without a whole reply */
	RLOCK_READER_BUDGET,		/* all readers would hold too much */
	RLOCK_READER_PROTOCOL,		/* not RESP2 */
	RLOCK_READER_MEMORY			/* out of memory */
} RlockReaderFault;

#define RLOCK_READER_NFAULTS	(RLOCK_READER_MEMORY + 1)

typedef struct RlockReader
{
	struct redisReader *hiredis;	/* NULL once a fault freed it */
	MemoryContext cxt;			/* the reply being read, and the one handed
								 * over until the next call: reset then */
	dlist_node	node;			/* in reply.c's list of readers */
	Size		held;			/* memory charged to RLOCK_REPLY_BUDGET */
	bool		building;		/* part of a reply is read */
	bool		handed;			/* a reply was handed over */
	RlockReaderFault fault;
	int64		fault_value;	/* the number that broke a limit */
	char		fault_text[128];	/* hiredis's words for a protocol error */
} RlockReader;

/* What a reply on a subscriber connection is */
typedef enum RlockPubsubFrame
{
	RLOCK_FRAME_REPLY,			/* answers the oldest command */
	RLOCK_FRAME_MESSAGE,		/* ["message" or "smessage", channel,
								 * payload] */
	RLOCK_FRAME_SUNSUBSCRIBE,	/* ["sunsubscribe", channel, count] */
	RLOCK_FRAME_INVALIDATE,		/* ["message", "__redis__:invalidate",
								 * keys (an array of strings) or nil] */
	RLOCK_FRAME_MALFORMED		/* a push of a shape Redis never sends */
} RlockPubsubFrame;

extern RlockReader *rlock_reader_create(MemoryContext cxt);
extern void rlock_reader_free(RlockReader *reader);
extern bool rlock_reader_feed(RlockReader *reader, const char *buf,
							  size_t len);
extern int	rlock_reader_next(RlockReader *reader, RlockReply **reply);
extern size_t rlock_reader_pending(RlockReader *reader);
extern bool rlock_reader_partial(RlockReader *reader);
extern bool rlock_reader_check_pending(RlockReader *reader);
extern void rlock_reader_describe_fault(RlockReader *reader, char *buf,
										size_t size);
extern void rlock_reply_free(RlockReply *reply);

/* shape.c: what a reply is (see also redis.h) */
extern void rlock_reply_describe(const RlockReply *reply, char *buf,
								 size_t size);
extern RlockPubsubFrame rlock_reply_pubsub_frame(const RlockReply *reply);
extern bool rlock_reply_is_host(const RlockReply *r);
extern int	rlock_reply_port(const RlockReply *r);

/*---- connections ----*/

/* Result of a step of a transport's own handshake (TLS) */
typedef enum RlockOpen
{
	RLOCK_OPEN_DONE,
	RLOCK_OPEN_WAIT,			/* call again when the socket is ready for
								 * conn->io_want */
	RLOCK_OPEN_FAILED			/* conn->error says why */
} RlockOpen;

/*
 * How bytes cross a connection: plain (TCP or Unix socket) or TLS.  The
 * protocol code above never knows which.  read and write return the
 * number of bytes moved, 0 when the socket is not ready (conn->io_want
 * then says what for), and -1 on end of file or failure (conn->error
 * says which).
 */
typedef struct RlockTransport
{
	RlockOpen	(*open) (RlockConn *conn);
	ssize_t		(*read) (RlockConn *conn, char *buf, size_t len);
	ssize_t		(*write) (RlockConn *conn, const char *buf, size_t len);
	bool		(*pending) (RlockConn *conn);
	void		(*close) (RlockConn *conn);
} RlockTransport;

extern const RlockTransport rlock_transport_plain;
extern const RlockTransport rlock_transport_tls;

/* One Redis server as the settings name it */
typedef struct RlockServer
{
	char	   *host;
	int			port;
	char	   *unix_socket;
	int			database;
	char	   *username;
	char	   *password_file;
	int			tls;			/* RlockTls */
	char	   *tls_ca_file;
	char	   *tls_cert_file;
	char	   *tls_key_file;
	char	   *tls_server_name;
	char		address[RLOCK_ADDRESS_LEN];	/* for messages */

	/* resolution of a host name that is not a numeric address */
	bool		resolving;
	bool		resolve_stale;	/* settings changed while resolving */
	struct gaicb gai;
	struct addrinfo gai_hints;
	char		gai_name[NI_MAXHOST];
	char		resolved[INET6_ADDRSTRLEN];	/* numeric address, "" if none */
	char		resolve_error[RLOCK_DETAIL_LEN];
	bool		tls_unix_logged;	/* said that TLS is not used on the socket */
} RlockServer;

/* Why a connection was dropped for what Redis sent, logged once each */
typedef enum RlockViolation
{
	RLOCK_VIOLATION_UNSOLICITED,	/* a reply with no command */
	RLOCK_VIOLATION_SHAPE,		/* a reply that does not fit its command */
	RLOCK_VIOLATION_PUBSUB,		/* a push of an unexpected shape */
	RLOCK_VIOLATION_READER,		/* see RlockReaderFault */
	RLOCK_VIOLATION_BUDGET,		/* RLOCK_READER_BUDGET */
	RLOCK_VIOLATION_HANDSHAKE,	/* a handshake answer that makes no sense */
	RLOCK_NVIOLATIONS
} RlockViolation;

/* What a connection is for */
typedef enum RlockConnUse
{
	RLOCK_USE_COMMAND,			/* the worker's scripts and queries */
	RLOCK_USE_SUBSCRIBER,		/* the waiters' unlock channels */
	RLOCK_USE_SYNC,				/* acquisitions followed by WAIT */
	RLOCK_USE_SENTINEL,			/* questions to a Sentinel */
	RLOCK_USE_WATCH,			/* a Sentinel's +switch-master messages */
	RLOCK_USE_CLUSTER,			/* a Redis Cluster node asked for the map */
	RLOCK_NUSES
} RlockConnUse;

/* The connections a data node has: COMMAND, SUBSCRIBER, SYNC */
#define RLOCK_NDATA		(RLOCK_USE_SYNC + 1)

struct RlockNode;

/*
 * What a connection tells whoever made it, and asks of it: sentinel.c
 * its two, router.c a Redis Cluster primary's, slotmap.c the map's,
 * topology.c the data connections of a standalone server or of the
 * primary the Sentinels name (the last two pass the worker's
 * RlockConnEvents on).  conn.c and wire.c call these, never a function
 * of their files.
 */
typedef struct RlockConnHooks
{
	/* the handshake is over: the connection takes commands */
	void		(*ready) (RlockConn *conn);
	/* the connection is gone; its commands were answered with NULL */
	void		(*lost) (RlockConn *conn);
	/* should it be up now?  If not, *why may say why (it starts NULL);
	 * the sync policy is asked first (rlock_topology_wanted) */
	bool		(*wanted) (RlockConn *conn, const char **why);
	/* on a subscriber: a message published on a channel it follows */
	void		(*message) (RlockConn *conn, const char *channel,
							int channellen, const char *payload,
							int payloadlen);
	/* on a subscriber: Redis dropped a shard channel's subscription by
	 * itself (NULL: nothing to do) */
	void		(*unsubscribed) (RlockConn *conn, const char *channel,
								 int channellen);
	/* on a subscriber: keys that tracked reads saw change (NULL keys:
	 * every key); NULL hook: such a message is a violation */
	void		(*invalidated) (RlockConn *conn, const RlockReply *keys);
	/* an error reply to "cmd": true if it was taken over (sent elsewhere,
	 * or answered later); NULL: every error goes to the sender */
	bool		(*redirect) (RlockConn *conn, RlockCmd *cmd,
							 const RlockReply *reply);
	/* the server answered as a replica (READONLY, or WAIT refused): true
	 * if the command is to be answered as lost, the primary having moved
	 * (NULL: false); the connection is given up either way */
	bool		(*demoted) (RlockConn *conn);
	/* may it be closed at once to free a descriptor for another (NULL:
	 * never)? */
	bool		(*reclaimable) (RlockConn *conn);
} RlockConnHooks;

struct RlockConn
{
	const char *role;			/* "command", "subscriber" ..., for messages */
	RlockConnUse use;
	bool		subscriber;		/* SUBSCRIBER or WATCH: pushes come */
	RlockServer *server;
	struct RlockNode *node;		/* a Redis Cluster primary's, else NULL */
	RlockConn **group;			/* the data connections of its server, by
								 * use (COMMAND, SUBSCRIBER, SYNC); NULL
								 * for the others */
	const RlockConnHooks *hooks;	/* set by whoever made it */
	MemoryContext cxt;			/* buffers and replies of this connection */
	RlockConnState state;

	/* the socket and what travels over it */
	pgsocket	sock;			/* PGINVALID_SOCKET while there is none */
	const RlockTransport *transport;
	void	   *tls;			/* the TLS transport's state */
	uint32		io_want;		/* events a transport step waits for */
	StringInfoData out;			/* bytes to write, from out_pos */
	int			out_pos;
	RlockReader *reader;
	TimestampTz partial_since;	/* part of a reply came then, and the rest
								 * not yet; 0 if none */
	bool		read_more;		/* stopped reading with bytes left */
	int			pos;			/* position in the wait set, -1 if none */
	uint32		registered;		/* events registered there */

	/* commands */
	dlist_head	inflight;		/* RlockCmd in send order */
	int			handshake;		/* handshake replies still expected */
	TimestampTz last_sent_at;	/* when the latest command was queued */
	uint64		sends;			/* commands queued so far */
	uint64		scripts_seq;	/* send_seq of the latest SCRIPT LOAD */
	TimestampTz scripts_loaded_at;	/* when SCRIPT LOAD was last queued */
	char		run_id[RLOCK_RUN_ID_LEN + 1];	/* of the server, "" if not
												 * known */
	int64		client_id;		/* CLIENT ID of this connection, 0 if not
								 * known */
	bool		defers_invalidations;	/* the server sends what a command's
										 * own writes invalidate after it
										 * (Redis 7.0 and later, Valkey) */
	int			replicas;		/* replicas ROLE (or INFO replication)
								 * listed, -1 if not known */
	bool		replicas_refused;	/* Redis refused both ROLE and INFO
									 * replication: replicas not known */
	int64		fence_id;		/* in a cluster: CLIENT ID of the latest
								 * connection made, for the next one's fence */
	char		fence_run_id[RLOCK_RUN_ID_LEN + 1];
	bool		fence_owed;		/* sync: lost with commands on the wire */
	TimestampTz role_at;		/* when ROLE was last sent */
	bool		role_inflight;

	/* life cycle */
	bool		failed;			/* unusable: dropped at the next tick */
	bool		quiet_drop;		/* for a cause logged on its own */
	bool		idle_drop;		/* closed for want of use: no outage */
	TimestampTz used_at;		/* a Redis Cluster primary's: a command
								 * was last routed to it then */
	TimestampTz deadline;		/* connect and handshake must end by then */
	TimestampTz retry_at;		/* next attempt while DOWN */
	int			backoff_ms;
	char		error[RLOCK_DETAIL_LEN];	/* why it is not READY */
	TimestampTz ready_at;		/* when it last became READY */
	TimestampTz since;			/* when it last became READY or was lost */
	bool		ever_ready;		/* was READY before: the next one counts
								 * as a reconnection */
	bool		outage_logged;	/* the current outage was logged */
	bool		ready_logged;	/* and so was its end */
	bool		flap_logged;	/* losses right after READY were logged */
	bool		woke;			/* its socket had an event this wake-up */
	void	   *worker_data;	/* the worker's, see rlock_conn_worker_data */
};

/*
 * The files of this folder call downward only, in this order (lowest
 * first; test/harness/check-layers checks it): scripts, args, reply,
 * shape, cluster, status, server, transport, tls, wire, conn, sentinel,
 * router, slotmap, handshake, topology, loop.  What each offers the
 * files above it follows, in that order.
 */

/* scripts.c */
extern int	rlock_scripts_count(void);
extern const char *rlock_script_text(int script);

/* cluster.c: a Redis Cluster's slot map, and its redirections */
#define RLOCK_CLUSTER_MAX_NODES		512 /* primaries rlock keeps */
#define RLOCK_CLUSTER_HOST_LEN		256
#define RLOCK_CLUSTER_ID_LEN		64
typedef struct RlockClusterNode
{
	char		host[RLOCK_CLUSTER_HOST_LEN];
	int			port;
	char		id[RLOCK_CLUSTER_ID_LEN];	/* "" when the reply gave none */
} RlockClusterNode;

typedef struct RlockClusterMap
{
	int			nnodes;
	RlockClusterNode node[RLOCK_CLUSTER_MAX_NODES];
	int16		owner[RLOCK_CLUSTER_SLOTS];	/* index in node[], -1: none */
} RlockClusterMap;

/* The refusal of a CLUSTER SHARDS reply that CLUSTER SLOTS can settle */
#define RLOCK_CLUSTER_SHARD_TWO_PRIMARIES	"a shard with two primaries up"
extern bool rlock_cluster_map_from_shards(const RlockReply *reply, bool tls,
										  const char *seed_host,
										  RlockClusterMap *map, char *error,
										  size_t errlen);
extern bool rlock_cluster_map_from_slots(const RlockReply *reply,
										 const char *seed_host,
										 RlockClusterMap *map, char *error,
										 size_t errlen);
extern bool rlock_cluster_parse_redirect(const char *s, int len,
										 const char *from_host, int *slot,
										 char *host, size_t hostsize,
										 int *port);

/* status.c: why a connection failed, and the record rlock_status() shows */
extern void rlock_conn_set_error(RlockConn *conn, const char *fmt,...)
			pg_attribute_printf(2, 3);
extern void rlock_conn_violation(RlockConn *conn, RlockViolation why,
								 const char *detail);
extern bool rlock_conn_unanswered(RlockConn *conn);
extern void rlock_redis_status_server(const char *version, const char *role);
extern void rlock_redis_status_sync_note(RlockConn *conn, const char *error,
										 bool both);
extern bool rlock_redis_status_changed(void);
extern void rlock_redis_status_take(RlockWorkerStatus *st);

/* server.c: servers from the settings, the layer's memory */
extern MemoryContext rlock_redis_context;
extern char *rlock_redis_strdup(const char *s);
extern void rlock_server_configure(RlockServer *srv, const char *host,
								   int port, const char *unix_socket);
extern void rlock_server_configure_node(RlockServer *srv, const char *host,
										int port);
extern void rlock_server_set_address(RlockServer *srv, const char *host,
									 int port);
extern void rlock_server_forget(RlockServer *srv);

/* transport.c */
extern bool rlock_socket_open(RlockConn *conn,
							  bool (*reclaim) (RlockConn *asking));
extern bool rlock_socket_connected(RlockConn *conn);
extern void rlock_socket_close(RlockConn *conn);
extern void rlock_resolve_start(RlockServer *srv);
extern void rlock_resolve_check(RlockServer *srv);
extern bool rlock_is_numeric_host(const char *host);

/* tls.c */
extern void rlock_tls_reset(void);

/* wire.c: one connection's commands and replies */
extern bool rlock_conn_resend(RlockConn *conn, RlockCmd *cmd);
extern void rlock_conn_answer(RlockConn *conn, RlockCmd *cmd,
							  const RlockReply *reply);
extern void rlock_wire_flush(RlockConn *conn);
extern void rlock_wire_read(RlockConn *conn);
extern void rlock_wire_refused(RlockConn *conn);

/* conn.c: the life of one connection */
typedef void (*RlockHandshakeFn) (RlockConn *conn);
extern void rlock_conn_init(RlockHandshakeFn begin);
extern RlockConn *rlock_conn_create(RlockServer *srv, RlockConnUse use,
									RlockConn **group,
									const RlockConnHooks *hooks);
extern int	rlock_conn_count(void);
extern RlockConn *rlock_conn_at(int i);
extern uint64 rlock_conn_sockets_version(void);
extern void rlock_conn_start_over(RlockConn *conn);
extern void rlock_conn_start(RlockConn *conn, TimestampTz now);
extern void rlock_conn_close(RlockConn *conn, const char *reason,
							 bool first_cause);
extern void rlock_conn_became_ready(RlockConn *conn);
extern void rlock_conn_io(RlockConn *conn);
extern bool rlock_conn_tick_failed(RlockConn *conn);
extern void rlock_conn_tick_opening(RlockConn *conn, TimestampTz now);
extern void rlock_conn_tick_answers(RlockConn *conn, TimestampTz now);
extern bool rlock_conn_tick_partial(RlockConn *conn, TimestampTz now);
extern TimestampTz rlock_conn_answer_due(RlockConn *conn);
extern TimestampTz rlock_conn_reader_due(RlockConn *conn);
extern bool rlock_conn_buffered(RlockConn *conn);

/* sentinel.c */
typedef void (*RlockPrimaryMovedFn) (const char *host, int port);
extern void rlock_sentinel_start(RlockPrimaryMovedFn moved);
extern void rlock_sentinel_configure(void);
extern bool rlock_sentinel_settings_changed(void);
extern bool rlock_sentinel_active(void);
extern RlockServer *rlock_sentinel_server(void);
extern bool rlock_sentinel_master_known(void);
extern bool rlock_sentinel_answering(void);
extern const char *rlock_sentinel_error(void);
extern void rlock_sentinel_recheck(void);
extern void rlock_sentinel_tick(TimestampTz now);
extern TimestampTz rlock_sentinel_next(void);
extern void rlock_sentinel_status(RlockWorkerStatus *st);

/* router.c: a Redis Cluster's primaries, routes and redirections */
typedef struct RlockNode
{
	RlockServer server;
	RlockConn  *conn[RLOCK_NDATA];
	int			index;			/* in router.c's table */
	bool		primary;		/* a primary of the latest map (serving
								 * slots, or none yet) */
	char		note[128];		/* the latest TRYAGAIN or CLUSTERDOWN */
	TimestampTz note_at;
} RlockNode;

extern bool rlock_router_active(void);
extern RlockCmd *rlock_router_send_own(RlockConn *conn, RlockReplyFn done,
									   RlockShape shape, Size size,
									   const char *first, const char *second);
extern void rlock_router_start(const RlockConnEvents *events);
extern void rlock_router_reconfigure(void);
extern int	rlock_router_nodes(RlockNode ***out);
extern int	rlock_router_primaries(void);
extern bool rlock_router_map_known(const char **why);
extern RlockConn **rlock_router_group(int slot, int uses);
extern RlockConn *rlock_router_any(void);
extern void rlock_router_refresh_soon(void);
extern void rlock_router_refresh_again(void);
extern TimestampTz rlock_router_refresh_due(void);
extern void rlock_router_refreshing(TimestampTz now, TimestampTz next);
extern void rlock_router_refresh_reset(void);
extern void rlock_router_map_failed(const char *why);
extern void rlock_router_apply(const RlockClusterMap *m, const char *through);
extern void rlock_router_tick(TimestampTz now);
extern TimestampTz rlock_router_next(void);

/* slotmap.c: the connection that asks a Redis Cluster for its map */
extern void rlock_slotmap_configure(void);
extern int	rlock_slotmap_pubsub(void);
extern bool rlock_slotmap_answering(void);
extern void rlock_slotmap_tick(TimestampTz now);
extern TimestampTz rlock_slotmap_next(void);
extern void rlock_slotmap_status(RlockWorkerStatus *st);

/* handshake.c */
extern void rlock_handshake_begin(RlockConn *conn);
extern void rlock_handshake_ping(RlockConn *conn);
extern void rlock_handshake_role(RlockConn *conn);

/* topology.c */
extern bool rlock_topology_wanted(RlockConn *conn, const char **why);

#endif							/* RLOCK_REDIS_INT_H */
