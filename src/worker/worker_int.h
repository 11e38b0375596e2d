#ifndef RLOCK_WORKER_INT_H
#define RLOCK_WORKER_INT_H

#include "lib/ilist.h"

#include "shared/shared.h"

/*---- worker side ----*/

/* What a command on the wire is for, so its reply can be dispatched */
typedef enum RlockCmdType
{
	RLOCK_CMD_HANDSHAKE,		/* AUTH, SELECT, CLIENT SETNAME */
	RLOCK_CMD_SCRIPT_LOAD,		/* SCRIPT LOAD of script "index" */
	RLOCK_CMD_ACQUIRE,			/* acquire script for a request */
	RLOCK_CMD_RELEASE,			/* release script for a hold entry */
	RLOCK_CMD_QUERY,			/* EXISTS, PTTL or PING for a request */
	RLOCK_CMD_RENEW,			/* renewal script for a batch of entries */
	RLOCK_CMD_VERIFY,			/* verify script for a batch of a request */
	RLOCK_CMD_SUBSCRIBE,		/* expects one subscribe confirmation */
	RLOCK_CMD_UNSUBSCRIBE,		/* expects one unsubscribe confirmation */
	RLOCK_CMD_PING,				/* keeps an idle connection checked */
	RLOCK_CMD_SERVER_INFO		/* ROLE, for rlock_status() */
} RlockCmdType;

/* Handshake commands whose failure does not fail the connection */
#define RLOCK_HANDSHAKE_OPTIONAL	(-1)	/* CLIENT SETNAME */
#define RLOCK_HANDSHAKE_CLIENT_ID	(-2)	/* CLIENT ID: remember it */
#define RLOCK_HANDSHAKE_FENCE		(-3)	/* CLIENT KILL ID of the last one */
#define RLOCK_HANDSHAKE_INFO		(-4)	/* INFO server: version, run_id */

/*
 * A command sent and not yet answered.  Each connection keeps its commands
 * in send order; Redis answers in that order.
 */
typedef struct RlockCmd
{
	dlist_node	node;
	RlockCmdType type;
	TimestampTz sent_at;
	int			index;			/* script (SCRIPT_LOAD); a negative one
								 * marks a handshake command allowed to
								 * fail (RLOCK_HANDSHAKE_*) */
	int			slot;			/* request commands: slot and request */
	uint64		seq;
	int			hold;			/* ACQUIRE, RELEASE: the hold entry */
	int32		target;			/* ACQUIRE, RELEASE: count to leave;
								 * VERIFY: the sending it belongs to */
	int64		lease_ms;		/* ACQUIRE, RELEASE, RENEW: lease sent;
								 * VERIFY: the margin */
	int			nholds;			/* RENEW, VERIFY: entries in the batch */
	int		   *holds;			/* RENEW, VERIFY: entry and generation pairs */
} RlockCmd;


struct redisAsyncContext;
struct RlockServer;

/* One hiredis connection and its place in the worker's wait set */
typedef struct RlockConn
{
	const char *role;			/* "command" or "subscriber", for messages */
	bool		subscriber;
	struct RlockServer *server;
	struct redisAsyncContext *ac;	/* NULL while there is no connection */
	RlockConnState state;
	uint32		want;			/* socket events hiredis asked for */
	uint32		registered;		/* socket events in the wait set */
	int			pos;			/* position in the wait set, -1 if none */
	int			handshake;		/* handshake replies still expected */
	char		run_id[RLOCK_RUN_ID_LEN + 1];	/* of the server, "" if not
												 * known */
	bool		failed;			/* a callback found the connection unusable */
	TimestampTz deadline;		/* connect and handshake must end by then */
	TimestampTz retry_at;		/* next attempt while DOWN */
	int			backoff_ms;
	dlist_head	inflight;		/* RlockCmd in send order */
	char		error[RLOCK_DETAIL_LEN];	/* why it is not READY */
	TimestampTz ready_at;		/* when it last became READY */
	TimestampTz since;			/* when it last became READY or was lost */
	bool		ever_ready;		/* was READY before: the next one counts
								 * as a reconnection */
	TimestampTz last_sent_at;	/* when the latest command was queued */
	bool		outage_logged;	/* the current outage was logged */
	bool		ready_logged;	/* and so was its end */
	bool		flap_logged;	/* losses right after READY were logged */
} RlockConn;

/* conn.c */
extern struct RlockServer *rlock_server;
extern void rlock_conn_init(void);
extern void rlock_conn_reload(void);
extern RlockConn *rlock_cmd_conn(void);
extern RlockConn *rlock_sub_conn(void);
extern const char *rlock_server_address(void);
extern void rlock_conn_tick(TimestampTz now);
extern TimestampTz rlock_conn_next_tick(void);
extern void rlock_conn_wait(long timeout_ms);
extern void rlock_conn_flush(void);
extern bool rlock_conn_send(RlockConn *conn, RlockCmd *cmd, int argc,
							const char **argv, const size_t *argvlen);
extern void rlock_conn_drop(RlockConn *conn, const char *reason);
extern void rlock_conn_keepalive(bool on);
extern void rlock_status_error(const char *msg);
extern void rlock_status_touch(void);
extern void rlock_status_publish(void);
extern RlockCmd *rlock_cmd_new(RlockCmdType type);
extern void rlock_cmd_free(RlockCmd *cmd);

/* scripts.c */
typedef enum RlockScript
{
	RLOCK_SCRIPT_ACQUIRE,
	RLOCK_SCRIPT_RELEASE,
	RLOCK_SCRIPT_RENEW,
	RLOCK_SCRIPT_VERIFY,
	RLOCK_NSCRIPTS
} RlockScript;
extern void rlock_scripts_load(RlockConn *conn);
extern bool rlock_script_loaded(int index, const char *sha, int len);
extern bool rlock_script_missing(const char *error);
extern const char *rlock_script_sha(RlockScript script);

/* worker.c */
extern PGDLLEXPORT void rlock_worker_main(Datum main_arg);
extern void rlock_worker_reply(RlockConn *conn, RlockCmd *cmd, void *reply);
extern void rlock_worker_conn_ready(RlockConn *conn);
extern void rlock_worker_conn_lost(RlockConn *conn);
extern bool rlock_worker_retry(int slot, const char *key, int keylen);
extern bool rlock_worker_waiting(int slot, const char *key, int keylen);

/* owners.c */
extern void rlock_owners_init(void);
extern void rlock_owners_note(int index);
extern int	rlock_owners_holds(uint64 owner_id, const int **holds);
extern void rlock_owners_sweep(void);

/* waiters.c: local waiters and the subscriptions they share */
extern void rlock_waiters_init(int nslots);
extern void rlock_waiters_join(int slot, const char *key, int keylen);
extern bool rlock_waiters_leave(int slot, bool pass_wake, const char *key,
								int keylen);
extern uint64 rlock_waiters_wakes(int slot);
extern TimestampTz rlock_waiters_line(const char *key, int keylen);
extern void rlock_waiters_busy_until(int slot, const char *key, int keylen,
									 TimestampTz until);
#define RLOCK_HANDED_OFF		1
#define RLOCK_HANDED_OFF_ECHO	2
extern int	rlock_waiters_hand_off(const char *key, int keylen);
extern void rlock_waiters_echo_cancel(const char *key, int keylen);
extern void rlock_waiters_reply(RlockCmd *cmd, void *reply);
extern void rlock_waiters_message(const char *channel, int channellen,
								  const char *payload, int payloadlen);
extern void rlock_waiters_conn_ready(void);
extern void rlock_waiters_conn_lost(void);
extern int	rlock_waiters_channels(void);

/* renew.c: the watchdog, and the batches of entries it and VERIFY use */
#define RLOCK_BATCH		100
extern bool rlock_batch_send(RlockCmdType type, RlockScript script,
							 int64 arg_ms, const int *pairs, int n,
							 int slot, uint64 seq, int32 tag);
extern int	rlock_batch_apply(RlockCmd *cmd, void *reply, bool extend_only,
							  int *extended);
extern bool rlock_hold_mark_lost(RlockHold *h);
extern void rlock_renew_tick(TimestampTz now);
extern TimestampTz rlock_renew_next(void);
extern void rlock_renew_soon(void);
extern void rlock_renew_reply(RlockCmd *cmd, void *reply);

#endif
