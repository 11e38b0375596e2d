/*-------------------------------------------------------------------------
 *
 * sentinel.c
 *		Finding the Redis primary through Redis Sentinel, and following
 *		it through failovers (rlock.topology = sentinel).
 *
 * Two connections of this file's own go to one Sentinel at a time, the
 * first of rlock.nodes that answers: one asks SENTINEL
 * GET-MASTER-ADDR-BY-NAME every second (and SENTINEL SENTINELS now and
 * then, for rlock_status()), the other is subscribed to +switch-master,
 * so that a failover is asked about at once rather than at the next
 * poll.  The answer, not the message, decides: a
 * message only brings the next question forward.  A Sentinel that fails
 * (unreachable, a wrong password, a primary it does not know) is left for
 * the next one in the list; the connection's back-off paces the round.
 *
 * Only the Sentinels of rlock.nodes are ever connected to.  The peers a
 * Sentinel lists are counted for rlock_status() and nothing else: a
 * Sentinel learns them from hello messages that anyone allowed to
 * PUBLISH on __sentinel__:hello of a data node can forge, so an address
 * from that list never gets the Sentinel password, and a primary is
 * followed only when a configured Sentinel names it.  Nothing of a peer
 * but two counts is kept.  Such a message also makes the list as large
 * as its author wants: a list the reply reader refuses costs the
 * connection once, and is then not asked for a while.
 *
 * When the named primary changes, the topology is told (the function
 * given to rlock_sentinel_start): the data connections (command,
 * subscriber, sync) are dropped and made again to the new one; their
 * handshake checks with ROLE that it is a primary.  The worker then
 * restates every hold it has, as after any lost connection: a hold the
 * new primary kept is confirmed, one another owner took in the meantime
 * is a lost lock.  A data connection that fails, or finds a replica
 * (the old primary, demoted), asks the Sentinels again at once.
 *
 * Everything a Sentinel says is checked like any reply: an address that
 * is no host and port drops the connection (a protocol violation).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/sentinel.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/redis_int.h"

/* Ask the Sentinel for the primary this often */
#define SENTINEL_POLL_MS		1000

/* ... and for the other Sentinels once every so many questions */
#define SENTINEL_PEERS_EVERY	5

/* A message, or a data connection lost, brings the next question forward,
 * but no nearer than this to the last one: a Sentinel that sends
 * +switch-master without pause must not make the worker ask, and follow,
 * as fast as the messages come */
#define SENTINEL_MIN_GAP_MS		100

/* A list of the other Sentinels that the reader refused (a hello message
 * can make an entry as large as its author wants) is not asked for again
 * for this long */
#define SENTINEL_PEERS_PAUSE_MIN	10

typedef struct SentinelNode
{
	RlockServer srv;
	int			reachable;		/* rlock's own last try: 1 yes, 0 no, -1
								 * not tried */
	int			seen_up;		/* the asked Sentinel's view: 1 up, 0 down,
								 * -1 not known */
} SentinelNode;

typedef enum SentinelAsk
{
	ASK_MASTER,					/* SENTINEL GET-MASTER-ADDR-BY-NAME */
	ASK_PEERS,					/* SENTINEL SENTINELS */
	ASK_SUBSCRIBE				/* SUBSCRIBE +switch-master */
} SentinelAsk;

typedef struct SentinelCmd
{
	RlockCmd	cmd;
	SentinelAsk ask;
} SentinelCmd;

/* the Sentinels of rlock.nodes, the only ones connected to */
static SentinelNode nodes[RLOCK_MAX_NODES];

/*
 * Their host names resolved, for rlock_status() alone: a Sentinel lists
 * its peers by address, and a Sentinel of rlock.nodes named by host name
 * is one of those peers.  Apart from nodes[], which is set afresh at each
 * configuration, since a lookup may still be under way in glibc.
 */
static RlockServer lookups[RLOCK_MAX_NODES];
static int	nnodes = 0;
static int	current = 0;		/* the Sentinel the connections go to */
static SentinelNode no_sentinel;	/* their server while there is none */

/* the other Sentinels the asked one lists, for rlock_status() only */
static int	peers_listed = 0;
static int	peers_up = 0;
static TimestampTz peers_paused_until = 0;	/* not asked until then */
static bool peers_broke = false;	/* the list refused: the connection it
									 * broke is made again to the same
									 * Sentinel */

/* the settings this was configured from */
static int	conf_topology = -1;
static char *conf_nodes = NULL;
static char *conf_master = NULL;
static char *conf_username = NULL;
static char *conf_password_file = NULL;
static int	conf_tls = -1;
static char *conf_tls_files = NULL;

/* the questions */
static bool master_inflight = false;
static TimestampTz ask_at = 0;	/* next question */
static TimestampTz asked_at = 0;	/* the last one */
static int	asked = 0;

/* the primary */
static bool master_known = false;
static char master_host[NI_MAXHOST];
static int	master_port = 0;
static char error[RLOCK_DETAIL_LEN];	/* why no primary is known */
static char last_switch[2 * RLOCK_ADDRESS_LEN + 8];
static TimestampTz last_switch_at = 0;

/* the connections: one asks, the other is subscribed to +switch-master */
static RlockConn *asking = NULL;
static RlockConn *watching = NULL;

/* what to call when the Sentinels name another primary */
static RlockPrimaryMovedFn primary_moved = NULL;

static void sentinel_reply(RlockConn *conn, RlockCmd *cmd,
						   const RlockReply *reply);

/*---- settings ----*/

static char *
sentinel_tls_files(void)
{
	return psprintf("%s\n%s\n%s", rlock_tls_ca_file, rlock_tls_cert_file,
					rlock_tls_key_file);
}

static bool
conf_differs(const char *conf, const char *now)
{
	return conf == NULL || strcmp(conf, now) != 0;
}

/*
 * Did a setting the Sentinels are reached with change since
 * rlock_sentinel_configure()?
 */
bool
rlock_sentinel_settings_changed(void)
{
	char	   *files;
	bool		changed;

	if (conf_topology != rlock_topology)
		return true;
	if (rlock_topology != RLOCK_TOPOLOGY_SENTINEL)
		return false;
	files = sentinel_tls_files();
	changed = conf_differs(conf_nodes, rlock_nodes) ||
		conf_differs(conf_master, rlock_sentinel_master) ||
		conf_differs(conf_username, rlock_sentinel_username) ||
		conf_differs(conf_password_file, rlock_sentinel_password_file) ||
		conf_tls != rlock_sentinel_tls ||
		(rlock_sentinel_tls != RLOCK_TLS_OFF &&
		 conf_differs(conf_tls_files, files));
	pfree(files);
	return changed;
}

static void
conf_set(char **conf, const char *now)
{
	if (*conf != NULL)
		pfree(*conf);
	*conf = rlock_redis_strdup(now);
}

static void
node_init(SentinelNode *node, const char *host, int port)
{
	RlockServer *srv = &node->srv;

	if (!srv->resolving)
		memset(node, 0, sizeof(*node));
	else
	{
		/*
		 * glibc still works on the lookup of the old name, in this very
		 * gaicb: it is left alone, and the new name looked up once it
		 * ends.
		 */
		srv->resolve_stale = true;
		srv->resolved[0] = '\0';
		srv->resolve_error[0] = '\0';
		srv->tls_unix_logged = false;
	}
	srv->host = rlock_redis_strdup(host);
	srv->port = port;
	srv->unix_socket = rlock_redis_strdup("");
	srv->database = 0;
	srv->username = rlock_redis_strdup(rlock_sentinel_username);
	srv->password_file = rlock_redis_strdup(rlock_sentinel_password_file);
	srv->tls = rlock_sentinel_tls;
	srv->tls_ca_file = rlock_redis_strdup(rlock_tls_ca_file);
	srv->tls_cert_file = rlock_redis_strdup(rlock_tls_cert_file);
	srv->tls_key_file = rlock_redis_strdup(rlock_tls_key_file);
	/* a Sentinel is checked against its name as rlock.nodes gives it */
	srv->tls_server_name = rlock_redis_strdup("");
	rlock_format_address(srv->address, sizeof(srv->address), host, port);
	node->reachable = -1;
	node->seen_up = -1;
}

/*
 * Look up the address of Sentinel i's host name in the background (its
 * connection resolves the name on its own, and only while it is made).
 * A numeric address is its own.
 */
static void
lookup_start(int i)
{
	RlockServer *lk = &lookups[i];
	const char *host = nodes[i].srv.host;

	if (lk->host == NULL || strcmp(lk->host, host) != 0)
	{
		if (lk->host != NULL)
			pfree(lk->host);
		lk->host = rlock_redis_strdup(host);
		lk->resolved[0] = '\0';
		/* a lookup of the old name still under way: the new one follows */
		lk->resolve_stale = lk->resolving;
	}
	if (rlock_is_numeric_host(host))
		strlcpy(lk->resolved, host, sizeof(lk->resolved));
	else
		rlock_resolve_start(lk);
}

/*
 * Is the peer a Sentinel lists at "ip" and "port" Sentinel i of
 * rlock.nodes?
 */
static bool
lookup_matches(int i, const char *ip, int port)
{
	return nodes[i].srv.port == port &&
		(strcmp(nodes[i].srv.host, ip) == 0 ||
		 strcmp(lookups[i].resolved, ip) == 0);
}

/*
 * Take the settings: the Sentinels to ask and the primary's name.  The
 * primary is not known again until a Sentinel names it.
 */
static void
sentinel_configure(void)
{
	RlockNodeAddr addrs[RLOCK_MAX_NODES];
	char		parse_error[256];
	int			n;
	int			i;

	for (i = 0; i < nnodes; i++)
		rlock_server_forget(&nodes[i].srv);
	nnodes = current = 0;
	peers_listed = peers_up = 0;
	peers_paused_until = 0;
	peers_broke = false;
	conf_topology = rlock_topology;
	conf_set(&conf_nodes, rlock_nodes);
	conf_set(&conf_master, rlock_sentinel_master);
	conf_set(&conf_username, rlock_sentinel_username);
	conf_set(&conf_password_file, rlock_sentinel_password_file);
	conf_tls = rlock_sentinel_tls;
	if (conf_tls_files != NULL)
		pfree(conf_tls_files);
	{
		MemoryContext old = MemoryContextSwitchTo(rlock_redis_context);

		conf_tls_files = sentinel_tls_files();
		MemoryContextSwitchTo(old);
	}
	master_known = false;
	master_inflight = false;
	ask_at = 0;
	asked_at = 0;
	asked = 0;
	error[0] = '\0';
	if (no_sentinel.srv.host == NULL)
	{
		node_init(&no_sentinel, "", 0);
		strlcpy(no_sentinel.srv.address, "(no Sentinel)",
				sizeof(no_sentinel.srv.address));
	}

	if (rlock_topology != RLOCK_TOPOLOGY_SENTINEL)
		return;

	n = rlock_parse_nodes(rlock_nodes, addrs, RLOCK_MAX_NODES, parse_error,
						  sizeof(parse_error));
	if (n < 0)					/* the setting's check refused it already */
		n = 0;
	for (i = 0; i < n; i++)
		node_init(&nodes[i], addrs[i].host, addrs[i].port);
	nnodes = n;
	for (i = 0; i < n; i++)
		lookup_start(i);

	if (n == 0)
		snprintf(error, sizeof(error),
				 "rlock.topology is sentinel but rlock.nodes names no Sentinel");
	else if (rlock_sentinel_master[0] == '\0')
		snprintf(error, sizeof(error),
				 "rlock.topology is sentinel but rlock.sentinel_master is empty");
	else
		snprintf(error, sizeof(error),
				 "the Sentinels have not named the primary \"%s\" yet",
				 rlock_sentinel_master);
	if (!rlock_sentinel_active())
		ereport(LOG,
				(errmsg("rlock cannot reach Redis: %s", error)));
}

/*
 * Take the settings (the worker starts, or they changed): the Sentinels
 * to ask and the primary's name.  The primary is not known again until a
 * Sentinel names it; the connections go to the first Sentinel.
 */
void
rlock_sentinel_configure(void)
{
	sentinel_configure();
	if (asking != NULL)
		asking->server = watching->server = rlock_sentinel_server();
}

/*
 * Are Sentinels to be asked?
 */
bool
rlock_sentinel_active(void)
{
	return rlock_topology == RLOCK_TOPOLOGY_SENTINEL && nnodes > 0 &&
		rlock_sentinel_master[0] != '\0';
}

RlockServer *
rlock_sentinel_server(void)
{
	if (nnodes == 0)
		return &no_sentinel.srv;
	return &nodes[current].srv;
}

bool
rlock_sentinel_master_known(void)
{
	return rlock_sentinel_active() && master_known;
}

/*
 * Does a Sentinel answer now (and so will name the replica it promotes)?
 */
bool
rlock_sentinel_answering(void)
{
	return rlock_sentinel_active() && rlock_conn_ready(asking);
}

/*
 * Why the data connections wait: no primary named yet, and why.
 */
const char *
rlock_sentinel_error(void)
{
	return error;
}

/*---- questions and answers ----*/

static void
sentinel_send(RlockConn *conn, SentinelAsk ask, RlockArgs *args,
			  RlockShape shape)
{
	SentinelCmd *sc = MemoryContextAllocZero(rlock_redis_context,
											 sizeof(SentinelCmd));

	sc->cmd.done = sentinel_reply;
	sc->cmd.shape = shape;
	sc->ask = ask;
	if (!rlock_conn_send(conn, &sc->cmd, args))
	{
		pfree(sc);
		return;
	}
	if (ask == ASK_MASTER)
		master_inflight = true;
}

static RlockArgs *
sentinel_args(void)
{
	static RlockArgs *args = NULL;

	if (args == NULL)
		args = rlock_args_create(rlock_redis_context);
	rlock_args_reset(args);
	return args;
}

/*
 * Ask the Sentinel for the primary (and now and then for its peers).
 */
static void
sentinel_ask(RlockConn *conn, TimestampTz now)
{
	RlockArgs  *args = sentinel_args();

	rlock_args_cstr(args, "SENTINEL");
	rlock_args_cstr(args, "GET-MASTER-ADDR-BY-NAME");
	rlock_args_cstr(args, rlock_sentinel_master);
	sentinel_send(conn, ASK_MASTER, args, RLOCK_SHAPE_ARRAY_OR_NIL);
	asked_at = now;
	if (asked++ % SENTINEL_PEERS_EVERY == 0 && now >= peers_paused_until)
	{
		int			i;

		/* the names of rlock.nodes may point elsewhere by now */
		for (i = 0; i < nnodes; i++)
			lookup_start(i);
		args = sentinel_args();
		rlock_args_cstr(args, "SENTINEL");
		rlock_args_cstr(args, "SENTINELS");
		rlock_args_cstr(args, rlock_sentinel_master);
		sentinel_send(conn, ASK_PEERS, args, RLOCK_SHAPE_ARRAY);
	}
	ask_at = TimestampTzPlusMilliseconds(now, SENTINEL_POLL_MS);
}

/*
 * The Sentinel named the primary: follow it if it moved.
 */
static void
sentinel_master_reply(RlockConn *conn, const RlockReply *reply)
{
	char		address[RLOCK_ADDRESS_LEN];
	int			port;

	if (reply->type == RLOCK_REPLY_NIL)
	{
		char		why[RLOCK_DETAIL_LEN];

		snprintf(why, sizeof(why),
				 "the Sentinel at %s monitors no primary named \"%s\"",
				 conn->server->address, rlock_sentinel_master);
		if (!master_known)
			strlcpy(error, why, sizeof(error));
		rlock_conn_give_up(conn, why);
		return;
	}
	if (reply->elements != 2 || !rlock_reply_is_host(reply->element[0]) ||
		(port = rlock_reply_port(reply->element[1])) == 0)
	{
		rlock_conn_fail(conn,
						"an answer to SENTINEL GET-MASTER-ADDR-BY-NAME that is no host and port");
		return;
	}
	if (master_known && strcmp(master_host, reply->element[0]->str) == 0 &&
		master_port == port)
		return;

	rlock_format_address(address, sizeof(address), reply->element[0]->str,
						 port);
	if (master_known)
	{
		char		old[RLOCK_ADDRESS_LEN];

		rlock_format_address(old, sizeof(old), master_host, master_port);
		snprintf(last_switch, sizeof(last_switch), "%s -> %s", old, address);
		last_switch_at = GetCurrentTimestamp();
		ereport(LOG,
				(errmsg("rlock follows a failover of \"%s\": the Sentinel at %s names %s as the primary, not %s",
						rlock_sentinel_master, conn->server->address,
						address, old),
				 errdetail("rlock connects to the new primary and restates the locks it holds; a lock another owner took in between is reported lost.")));
	}
	else
		ereport(LOG,
				(errmsg("rlock uses the primary \"%s\" at %s, as the Sentinel at %s names it",
						rlock_sentinel_master, address,
						conn->server->address)));
	strlcpy(master_host, reply->element[0]->str, sizeof(master_host));
	master_port = port;
	master_known = true;
	error[0] = '\0';
	primary_moved(master_host, master_port);
}

/*
 * Look up "name" in the flat field list of one SENTINEL SENTINELS entry.
 */
static const RlockReply *
sentinel_field(const RlockReply *entry, const char *name)
{
	int			i;

	for (i = 0; i + 1 < entry->elements; i += 2)
	{
		if (entry->element[i]->type == RLOCK_REPLY_STRING &&
			strcmp(entry->element[i]->str, name) == 0)
			return entry->element[i + 1];
	}
	return NULL;
}

/*
 * Is a peer down in the view of the Sentinel that lists it?
 */
static bool
sentinel_peer_down(const RlockReply *flags)
{
	return flags != NULL && flags->type == RLOCK_REPLY_STRING &&
		(strstr(flags->str, "s_down") != NULL ||
		 strstr(flags->str, "o_down") != NULL ||
		 strstr(flags->str, "disconnected") != NULL);
}

/*
 * The asked Sentinel told of its peers: note which of rlock.nodes are up
 * in its view, and count the others.  Those are never added to the
 * Sentinels rlock asks (see the file header): anyone who may publish a
 * hello message on a data node can put an address in this list.
 * Entries that make no sense are passed over.
 */
static void
sentinel_peers_reply(RlockConn *conn, const RlockReply *reply)
{
	int			i;
	int			j;

	peers_listed = peers_up = 0;
	for (i = 0; i < reply->elements; i++)
	{
		const RlockReply *entry = reply->element[i];
		const RlockReply *ip;
		const RlockReply *portr;
		int			port;
		int			up;

		if (entry->type != RLOCK_REPLY_ARRAY)
			continue;
		ip = sentinel_field(entry, "ip");
		portr = sentinel_field(entry, "port");
		if (ip == NULL || portr == NULL || !rlock_reply_is_host(ip) ||
			(port = rlock_reply_port(portr)) == 0)
			continue;
		up = sentinel_peer_down(sentinel_field(entry, "flags")) ? 0 : 1;
		for (j = 0; j < nnodes; j++)
		{
			if (lookup_matches(j, ip->str, port))
				break;
		}
		if (j < nnodes)
			nodes[j].seen_up = up;
		else
		{
			peers_listed++;
			peers_up += up;
		}
	}
	rlock_redis_status_touch();
}

/*
 * The reader refused the list of the other Sentinels, and the connection
 * goes: a peer planted by a hello message can make the list as large as
 * its author wants, and every Sentinel lists the same peers.  The list is
 * for rlock_status() only: it is not asked for a while, and the
 * connection is made again to the same Sentinel.
 */
static void
sentinel_peers_refused(RlockConn *conn)
{
	int			i;

	peers_paused_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 SENTINEL_PEERS_PAUSE_MIN * 60 * 1000);
	peers_broke = true;
	peers_listed = peers_up = 0;
	for (i = 0; i < nnodes; i++)
		nodes[i].seen_up = -1;
	ereport(LOG,
			(errmsg("rlock stops asking the Sentinels for their peers for %d minutes: the Sentinel at %s answered SENTINEL SENTINELS with a reply rlock does not accept",
					SENTINEL_PEERS_PAUSE_MIN, conn->server->address),
			 errdetail("The list is used for rlock_status() only; until it is asked again, sentinels_known and sentinels_reachable count the Sentinels of rlock.nodes only.")));
	rlock_redis_status_touch();
}

static void
sentinel_reply(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	SentinelCmd *sc = (SentinelCmd *) cmd;

	if (sc->ask == ASK_MASTER)
		master_inflight = false;
	if (reply == NULL && sc->ask == ASK_PEERS && cmd->reply_refused)
		sentinel_peers_refused(conn);
	if (reply != NULL && !conn->failed)
	{
		if (reply->type == RLOCK_REPLY_ERROR)
		{
			char		why[RLOCK_DETAIL_LEN];

			/* PEERS and SUBSCRIBE are a help, not a need */
			if (sc->ask == ASK_MASTER)
			{
				snprintf(why, sizeof(why),
						 "the Sentinel at %s refused to name the primary: %s",
						 conn->server->address, reply->str);
				if (!master_known)
					strlcpy(error, why, sizeof(error));
				rlock_conn_give_up(conn, why);
			}
		}
		else if (sc->ask == ASK_MASTER)
			sentinel_master_reply(conn, reply);
		else if (sc->ask == ASK_PEERS)
			sentinel_peers_reply(conn, reply);
	}
	pfree(sc);
}

/*---- connection events ----*/

static void
sentinel_conn_ready(RlockConn *conn)
{
	nodes[current].reachable = 1;
	rlock_redis_status_touch();
	if (conn->use == RLOCK_USE_SENTINEL)
	{
		sentinel_ask(conn, GetCurrentTimestamp());
		return;
	}
	else
	{
		RlockArgs  *args = sentinel_args();

		rlock_args_cstr(args, "SUBSCRIBE");
		rlock_args_cstr(args, "+switch-master");
		sentinel_send(conn, ASK_SUBSCRIBE, args, RLOCK_SHAPE_SUBSCRIBE);
	}
}

/*
 * A Sentinel connection failed: the asking one moves on to the next
 * Sentinel, and the watching one follows it there.
 */
static void
sentinel_conn_lost(RlockConn *conn)
{
	RlockConn  *other = watching;
	int			failed = current;

	if (!rlock_sentinel_active() || conn->use != RLOCK_USE_SENTINEL)
		return;
	if (peers_broke)
	{
		/* the Sentinel answered; only its list was refused */
		peers_broke = false;
		conn->retry_at = 0;
		return;
	}
	nodes[failed].reachable = 0;
	if (!master_known)
	{
		char		why[RLOCK_DETAIL_LEN];

		snprintf(why, sizeof(why),
				 "no Sentinel named the primary \"%s\" yet; the last one tried, at %s: %s",
				 rlock_sentinel_master, conn->server->address,
				 rlock_conn_error(conn));
		strlcpy(error, why, sizeof(error));
	}
	current = (current + 1) % nnodes;
	conn->server = &nodes[current].srv;
	if (other->server != conn->server)
	{
		if (other->state != RLOCK_CONN_DOWN)
		{
			other->quiet_drop = true;
			rlock_conn_give_up(other, "rlock asks another Sentinel now");
		}
		other->server = conn->server;
	}
	/* the next Sentinel at once, unless the whole round failed */
	if (current != 0)
		conn->retry_at = 0;
	rlock_redis_status_touch();
}

/*
 * Should a Sentinel connection be up: are Sentinels asked?
 */
static bool
sentinel_conn_wanted(RlockConn *conn, const char **why)
{
	return rlock_sentinel_active();
}

/*
 * A Sentinel answered as a replica would (it never should): its
 * commands are answered as lost, as a data connection's behind
 * Sentinels are.
 */
static bool
sentinel_conn_demoted(RlockConn *conn)
{
	return rlock_sentinel_active();
}

/*
 * Ask whom the Sentinel names now: at once, unless the last question was
 * asked less than SENTINEL_MIN_GAP_MS ago.
 */
static void
sentinel_ask_soon(void)
{
	TimestampTz earliest = TimestampTzPlusMilliseconds(asked_at,
													   SENTINEL_MIN_GAP_MS);

	if (ask_at > earliest)
		ask_at = earliest;
}

/*
 * A +switch-master message: ask soon whom the Sentinel names now.
 */
static void
sentinel_message(RlockConn *conn, const char *channel, int channellen,
				 const char *payload, int payloadlen)
{
	size_t		namelen = strlen(rlock_sentinel_master);

	if (channellen == 14 && memcmp(channel, "+switch-master", 14) == 0 &&
		(size_t) payloadlen > namelen &&
		memcmp(payload, rlock_sentinel_master, namelen) == 0 &&
		payload[namelen] == ' ')
		sentinel_ask_soon();
}

/*
 * A data connection failed or found a replica: the primary may have
 * moved, ask soon.
 */
void
rlock_sentinel_recheck(void)
{
	sentinel_ask_soon();
}

static const RlockConnHooks sentinel_hooks = {
	.ready = sentinel_conn_ready,
	.lost = sentinel_conn_lost,
	.wanted = sentinel_conn_wanted,
	.message = sentinel_message,
	.demoted = sentinel_conn_demoted
};

/*
 * The worker starts: the settings, and the two connections, made when
 * Sentinels are to be asked.  "moved" is called when they name another
 * primary.
 */
void
rlock_sentinel_start(RlockPrimaryMovedFn moved)
{
	primary_moved = moved;
	rlock_sentinel_configure();
	asking = rlock_conn_create(rlock_sentinel_server(), RLOCK_USE_SENTINEL,
							   NULL, &sentinel_hooks);
	watching = rlock_conn_create(rlock_sentinel_server(), RLOCK_USE_WATCH,
								 NULL, &sentinel_hooks);
}

void
rlock_sentinel_tick(TimestampTz now)
{
	int			i;

	if (!rlock_sentinel_active())
		return;
	for (i = 0; i < nnodes; i++)
		rlock_resolve_check(&lookups[i]);
	if (rlock_conn_ready(asking) && !master_inflight && now >= ask_at)
		sentinel_ask(asking, now);
}

TimestampTz
rlock_sentinel_next(void)
{
	if (!rlock_sentinel_active() || !rlock_conn_ready(asking) ||
		master_inflight)
		return DT_NOEND;
	return ask_at;
}

/*
 * What rlock_status() shows of the Sentinels: the one asked, how many are
 * known and how many reachable, and the last failover followed.  Those
 * of rlock.nodes count as reachable by rlock's own last try where it made
 * one, else by the asked Sentinel's view; the other Sentinels it lists
 * are added as it sees them.
 */
void
rlock_sentinel_status(RlockWorkerStatus *st)
{
	RlockConn  *conn = asking;
	int			reachable = 0;
	int			i;

	st->sentinel[0] = '\0';
	st->sentinels_known = 0;
	st->sentinels_reachable = 0;
	strlcpy(st->last_switch, last_switch, sizeof(st->last_switch));
	st->last_switch_at = last_switch_at;
	if (!rlock_sentinel_active())
		return;
	if (conn->state == RLOCK_CONN_READY)
		strlcpy(st->sentinel, conn->server->address, sizeof(st->sentinel));
	for (i = 0; i < nnodes; i++)
	{
		int			up = nodes[i].reachable;

		if (i == current && conn->state == RLOCK_CONN_READY)
			up = 1;
		else if (up < 0)
			up = nodes[i].seen_up;
		reachable += (up == 1);
	}
	st->sentinels_known = nnodes + peers_listed;
	st->sentinels_reachable = reachable + peers_up;
}
