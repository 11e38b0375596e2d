/*-------------------------------------------------------------------------
 *
 * redis.h
 *		The Redis layer as the worker sees it: connections that carry
 *		commands and bring back replies, a command builder, replies with
 *		their classification, and the registry of Lua scripts.
 *
 * Nothing here exposes hiredis, OpenSSL or a socket: this folder is the
 * only place that knows RESP and the network.  Replies come back through
 * the function each command carries (RlockCmd.done), connection events
 * through the table the worker registers (RlockConnEvents).  Neither may
 * close a connection, nor raise an error but for running out of memory
 * (which ends the worker; the next one restates every count); a reply
 * that makes no sense to the worker is reported with rlock_conn_fail(),
 * and the connection is dropped and made again at the next tick.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/redis.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_REDIS_H
#define RLOCK_REDIS_H

#include "datatype/timestamp.h"
#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "utils/palloc.h"

#include "shared/shared.h"

/*---- replies ----*/

typedef enum RlockReplyType
{
	RLOCK_REPLY_STRING,			/* bulk string */
	RLOCK_REPLY_STATUS,			/* simple string: +OK */
	RLOCK_REPLY_ERROR,			/* simple error: -ERR ... */
	RLOCK_REPLY_INTEGER,
	RLOCK_REPLY_NIL,
	RLOCK_REPLY_ARRAY
} RlockReplyType;

/*
 * A reply as read from Redis.  Strings are NUL-terminated (Redis may put
 * a NUL inside them: use len).  Valid only while the function it is
 * handed to runs.
 */
typedef struct RlockReply
{
	RlockReplyType type;
	int64		integer;		/* INTEGER */
	int			len;			/* STRING, STATUS, ERROR */
	char	   *str;
	int			elements;		/* ARRAY */
	struct RlockReply **element;
} RlockReply;

/*
 * The replies a command accepts.  An error reply fits every command (Redis
 * may refuse anything); any other reply that does not fit is a protocol
 * violation, and the connection is dropped.
 */
typedef enum RlockShape
{
	RLOCK_SHAPE_OK,				/* the status OK */
	RLOCK_SHAPE_PONG,			/* the status PONG */
	RLOCK_SHAPE_INTEGER,
	RLOCK_SHAPE_INTEGER_OR_NIL,
	RLOCK_SHAPE_INTEGERS,		/* an array of exactly n integers */
	RLOCK_SHAPE_STRING,			/* a bulk string */
	RLOCK_SHAPE_ARRAY,			/* an array of anything */
	RLOCK_SHAPE_ARRAY_OR_NIL,
	RLOCK_SHAPE_SUBSCRIBE,		/* ["subscribe", channel, count] */
	RLOCK_SHAPE_UNSUBSCRIBE,	/* ["unsubscribe", channel, count] */
	RLOCK_SHAPE_SSUBSCRIBE,		/* ["ssubscribe", channel, count] */
	RLOCK_SHAPE_SUNSUBSCRIBE	/* ["sunsubscribe", channel, count] */
} RlockShape;

/* What an error reply means for whoever sent the command */
typedef enum RlockReplyClass
{
	RLOCK_REPLY_FINE,			/* not an error */
	RLOCK_REPLY_NOSCRIPT,		/* the script is not in Redis's cache */
	RLOCK_REPLY_WRONGTYPE,		/* the key holds another type */
	RLOCK_REPLY_TRANSIENT,		/* may work later: BUSY, LOADING, OOM,
								 * READONLY, MASTERDOWN, TRYAGAIN ... */
	RLOCK_REPLY_REFUSED			/* anything else: ERR, NOPERM, NOAUTH ... */
} RlockReplyClass;

extern bool rlock_reply_fits(const RlockReply *reply, RlockShape shape,
							 int n);
extern RlockReplyClass rlock_reply_classify(const RlockReply *reply);

/*---- commands ----*/

typedef struct RlockConn RlockConn;
typedef struct RlockCmd RlockCmd;

/*
 * Called exactly once for every command sent: with its reply, or with
 * NULL when the connection went away before the reply came.  It owns the
 * command from then on.
 */
typedef void (*RlockReplyFn) (RlockConn *conn, RlockCmd *cmd,
							  const RlockReply *reply);

/*
 * A command on the wire.  Senders embed it at the start of their own
 * record and fill in done, shape and nelements; the connection sets the
 * rest.
 */
struct RlockCmd
{
	dlist_node	node;			/* in its connection's list, in send order */
	RlockReplyFn done;
	RlockShape	shape;			/* the replies that fit */
	int			nelements;		/* RLOCK_SHAPE_INTEGERS: how many */
	TimestampTz sent_at;
	uint64		send_seq;		/* its place among the connection's sends */
	bool		writes_locks;	/* may still write a lock if left behind */
	/* an (S)UNSUBSCRIBE: its channel, owned by the sender, so that Redis's
	 * own sunsubscribe of it is told from the confirmation */
	const char *channel;
	int			channellen;

	/* in a Redis Cluster: the command as sent, for a redirection */
	char	   *wire;
	int			wirelen;
	int			redirects;		/* MOVED and ASK followed so far */
	bool		asked;			/* sent behind ASKING */
	bool		unsent;			/* answered as lost, but known not to have
								 * run (a cluster refused it as a whole) */
	bool		internal;		/* the Redis layer's own (handshake, map):
								 * never redirected */
	bool		reply_refused;	/* answered as lost because the reader
								 * refused its reply: sent again, it would
								 * be refused again */
};

/*
 * A command being built: its arguments, copied as they are added, so the
 * caller never counts a length.
 */
typedef struct RlockArgs
{
	int			argc;
	int			maxargs;
	int		   *offsets;		/* of each argument in buf */
	int		   *lens;
	StringInfoData buf;
} RlockArgs;

extern RlockArgs *rlock_args_create(MemoryContext cxt);
extern void rlock_args_reset(RlockArgs *args);
extern void rlock_args_add(RlockArgs *args, const char *data, int len);
extern void rlock_args_cstr(RlockArgs *args, const char *s);
extern void rlock_args_int(RlockArgs *args, int64 value);
extern void rlock_args_script(RlockArgs *args, int script, int nkeys);

/*---- scripts ----*/

#define RLOCK_SHA1_HEX_LEN	40

extern int	rlock_script_register(const char *name, const char *text);
extern const char *rlock_script_sha(int script);
extern const char *rlock_script_name(int script);
extern bool rlock_scripts_reload(RlockConn *conn, const RlockCmd *cmd);

/*---- connections ----*/

/* What happens to connections, for the worker */
typedef struct RlockConnEvents
{
	/* the connection finished its handshake and takes commands */
	void		(*ready) (RlockConn *conn);
	/* the connection is gone; its commands were answered with NULL */
	void		(*lost) (RlockConn *conn);
	/* a message published on a channel the subscriber follows */
	void		(*message) (RlockConn *conn, const char *channel,
							int channellen, const char *payload,
							int payloadlen);
	/* Redis dropped a shard channel's subscription by itself: its slot
	 * moved to another node */
	void		(*unsubscribed) (RlockConn *conn, const char *channel,
								 int channellen);
	/* does a subscriber connection carry subscriptions the worker needs */
	bool		(*subscribed) (RlockConn *conn);
	/* keys that the command connection's tracked reads saw change (CLIENT
	 * TRACKING, redirected to this subscriber); NULL keys: every key */
	void		(*invalidated) (RlockConn *conn, const RlockReply *keys);
} RlockConnEvents;

/* where CLIENT TRACKING ... REDIRECT sends its invalidations */
#define RLOCK_INVALIDATE_CHANNEL	"__redis__:invalidate"


/*
 * Where a key (or a channel: they are placed alike) is served, and what a
 * command on it needs to know, in one answer (rlock_redis_route_key).  In
 * a Redis Cluster the connections are those of the primary serving the
 * key's hash slot (where none does, connections that are never ready,
 * whose rlock_conn_error() says why); otherwise the server's.
 */
typedef struct RlockRoute
{
	RlockConn  *command;		/* the scripts and queries on the key */
	RlockConn  *subscriber;		/* subscriptions to the channel */
	RlockConn  *sync;			/* acquisitions that replicas confirm */
	int			sync_need;		/* replicas that must confirm one now, 0 if
								 * acquisitions are not synced */
	int			sync_ask;		/* ... and how many WAIT asks for */
	bool		cluster;		/* a Redis Cluster: the keys and channels of
								 * one command must share a slot */
	int			pubsub;			/* the namespaces unlock messages use
								 * (RLOCK_PUBSUB_*) */
} RlockRoute;

/* The connections of a route the caller is about to use: a Redis Cluster
 * primary's are made when used, and closed when idle */
#define RLOCK_ROUTE_COMMAND		0x01
#define RLOCK_ROUTE_SUBSCRIBER	0x02
#define RLOCK_ROUTE_SYNC		0x04

extern void rlock_redis_start(const RlockConnEvents *events);
extern void rlock_redis_reload(void);
extern void rlock_redis_route_key(const char *key, int keylen, int uses,
								  RlockRoute *route);
extern RlockConn *rlock_redis_command_conn(void);
extern int64 rlock_redis_redirect_id(RlockConn *command);
extern bool rlock_redis_cluster(void);
extern RlockConn *rlock_redis_route(const char *key, int keylen);
extern RlockConn *rlock_redis_subscriber_for(const char *channel, int len);
extern void rlock_redis_want_subscribers(void);
extern int	rlock_redis_pubsub(void);
extern const char *rlock_redis_route_note(RlockConn *conn);
extern bool rlock_conn_is_subscriber(RlockConn *conn);
extern bool rlock_conn_is_sync(RlockConn *conn);
extern const char *rlock_conn_address(RlockConn *conn);
extern RlockConn *rlock_redis_sync_for(const char *key, int keylen);
extern int	rlock_redis_sync_need(RlockConn *sync, int *ask);
extern void rlock_redis_sync_acks(RlockConn *sync, int acks);
extern void rlock_redis_sync_failed(const char *detail);
extern bool rlock_redis_sync_fence_owed(RlockConn *sync);
extern void **rlock_conn_worker_data(RlockConn *conn);
extern bool rlock_redis_conn_wanted(RlockConn *conn);
extern bool rlock_redis_failover_awaited(void);
extern void rlock_redis_tick(TimestampTz now);
extern TimestampTz rlock_redis_next_tick(void);
extern void rlock_redis_flush(void);
extern void rlock_redis_wait(long timeout_ms);
extern void rlock_redis_keepalive(bool on);
extern void rlock_redis_status_touch(void);
extern void rlock_redis_status_error(const char *msg);
extern void rlock_redis_status_publish(int channels);

extern bool rlock_conn_ready(RlockConn *conn);
extern const char *rlock_conn_error(RlockConn *conn);
extern bool rlock_conn_send(RlockConn *conn, RlockCmd *cmd,
							const RlockArgs *args);
extern void rlock_conn_fail(RlockConn *conn, const char *what);
extern void rlock_conn_give_up(RlockConn *conn, const char *reason);

#endif							/* RLOCK_REDIS_H */
