/*-------------------------------------------------------------------------
 *
 * cluster.c
 *		A Redis Cluster's slot map, read from CLUSTER SHARDS (Redis 7.0
 *		and later) or CLUSTER SLOTS (before), and the redirections MOVED
 *		and ASK.
 *
 * The map says which primary serves each of the 16384 slots, and where
 * to reach it.  Everything in the reply is checked as untrusted input: a
 * reply that is not a map of this shape (a slot out of range, two
 * primaries for one slot, a port of 0, a host that cannot be one, more
 * nodes than rlock keeps) is refused as a whole with the reason, and the
 * caller keeps the map it had.  Slots no primary serves are left without
 * an owner, as Redis answers for them.  CLUSTER SHARDS also names the
 * primaries that serve no slot yet (a node being given its first ones),
 * which the map keeps as nodes without slots; CLUSTER SLOTS does not.
 *
 * Where a node is reached: its endpoint as the reply gives it (an
 * address, or a host name with cluster-preferred-endpoint-type), the
 * host rlock asked when the endpoint is empty (Redis's "unknown
 * endpoint"), and nowhere when it is "?" (a host name was preferred and
 * the node has none).  The port is the TLS one when rlock uses TLS and
 * CLUSTER SHARDS gives one.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/cluster.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "redis/redis_int.h"

/*
 * The value of field "name" in a reply that is a flat list of names and
 * values (a RESP2 map), or NULL.
 */
static const RlockReply *
cluster_field(const RlockReply *map, const char *name)
{
	int			i;

	for (i = 0; i + 1 < map->elements; i += 2)
	{
		const RlockReply *k = map->element[i];

		if ((k->type == RLOCK_REPLY_STRING || k->type == RLOCK_REPLY_STATUS) &&
			strcmp(k->str, name) == 0)
			return map->element[i + 1];
	}
	return NULL;
}

static bool
cluster_is_text(const RlockReply *r)
{
	return r != NULL &&
		(r->type == RLOCK_REPLY_STRING || r->type == RLOCK_REPLY_STATUS);
}

/*
 * A host as a node's endpoint may give it: printable, no spaces, not too
 * long.  Empty and "?" are handled by the caller.
 */
static bool
cluster_valid_host(const char *s, int len)
{
	int			i;

	if (len <= 0 || len >= RLOCK_CLUSTER_HOST_LEN)
		return false;
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c <= ' ' || c >= 0x7f || c == ',' || c == '/')
			return false;
	}
	return true;
}

static int
cluster_port(const RlockReply *r)
{
	int64		port;

	if (r == NULL)
		return 0;
	if (r->type == RLOCK_REPLY_INTEGER)
		port = r->integer;
	else if (cluster_is_text(r))
	{
		char	   *end;

		port = strtol(r->str, &end, 10);
		if (r->len == 0 || *end != '\0')
			return 0;
	}
	else
		return 0;
	return (port >= 1 && port <= 65535) ? (int) port : 0;
}

static void
cluster_reset(RlockClusterMap *map)
{
	int			i;

	map->nnodes = 0;
	for (i = 0; i < RLOCK_CLUSTER_SLOTS; i++)
		map->owner[i] = -1;
}

/*
 * Note a primary reached at endpoint:port (endpoint as the reply gives
 * it), with its id; returns its index, or -1 with the reason in error.
 */
static int
cluster_add_primary(RlockClusterMap *map, const RlockReply *endpoint,
					int port, const RlockReply *id, const char *seed_host,
					char *error, size_t errlen)
{
	const char *host;
	int			hostlen;
	RlockClusterNode *node;
	int			i;

	if (!cluster_is_text(endpoint))
	{
		snprintf(error, errlen, "a primary without an endpoint");
		return -1;
	}
	if (port == 0)
	{
		snprintf(error, errlen, "a primary without a valid port");
		return -1;
	}
	host = endpoint->str;
	hostlen = endpoint->len;
	if (hostlen == 0)
	{
		/* "unknown endpoint": the host rlock asked */
		host = seed_host;
		hostlen = strlen(seed_host);
	}
	else if (hostlen == 1 && host[0] == '?')
	{
		snprintf(error, errlen,
				 "a primary whose endpoint is unknown (\"?\": it has no host name, and cluster-preferred-endpoint-type asks for one)");
		return -1;
	}
	if (!cluster_valid_host(host, hostlen))
	{
		snprintf(error, errlen, "a primary whose endpoint is no host name or address");
		return -1;
	}
	if (id != NULL && (!cluster_is_text(id) || id->len == 0 ||
					   id->len >= RLOCK_CLUSTER_ID_LEN ||
					   strlen(id->str) != (size_t) id->len))
	{
		snprintf(error, errlen, "a primary whose node id is not one");
		return -1;
	}

	for (i = 0; i < map->nnodes; i++)
	{
		node = &map->node[i];
		if (node->port == port && strlen(node->host) == (size_t) hostlen &&
			memcmp(node->host, host, hostlen) == 0)
			return i;
	}
	if (map->nnodes == RLOCK_CLUSTER_MAX_NODES)
	{
		snprintf(error, errlen, "more than %d primaries",
				 RLOCK_CLUSTER_MAX_NODES);
		return -1;
	}
	node = &map->node[map->nnodes];
	memcpy(node->host, host, hostlen);
	node->host[hostlen] = '\0';
	node->port = port;
	if (id != NULL)
		strlcpy(node->id, id->str, sizeof(node->id));
	else
		node->id[0] = '\0';
	return map->nnodes++;
}

/*
 * Whether a node of CLUSTER SHARDS is up.  A primary that failed stays
 * in its shard as a primary until it comes back as a replica: Redis 8
 * lists it beside the replica promoted in its place (health "fail"),
 * 7.0 did not; either way a replica takes over its slots.
 */
static bool
cluster_node_healthy(const RlockReply *node)
{
	const RlockReply *health = cluster_field(node, "health");

	return !cluster_is_text(health) || strcmp(health->str, "online") == 0 ||
		strcmp(health->str, "loading") == 0;
}

/*
 * Give slots start..end to primary "owner"; false (with the reason) if
 * the range is not one, or one of them was given already.
 */
static bool
cluster_assign(RlockClusterMap *map, int64 start, int64 end, int owner,
			   char *error, size_t errlen)
{
	int64		slot;

	if (start < 0 || end >= RLOCK_CLUSTER_SLOTS || start > end)
	{
		snprintf(error, errlen, "a slot range that is not one (" INT64_FORMAT "-" INT64_FORMAT ")",
				 start, end);
		return false;
	}
	for (slot = start; slot <= end; slot++)
	{
		/* never twice, not even for the same primary: a reply repeating
		 * a range would cost a pass over it each time */
		if (map->owner[slot] >= 0)
		{
			snprintf(error, errlen, map->owner[slot] != owner ?
					 "slot " INT64_FORMAT " served by two primaries" :
					 "slot " INT64_FORMAT " listed twice", slot);
			return false;
		}
		map->owner[slot] = (int16) owner;
	}
	return true;
}

/*
 * The map from a CLUSTER SHARDS reply: per shard, its slots as start and
 * end pairs, and its nodes; the node whose role is "master" serves them.
 * A shard whose primary is marked failed serves nothing until the
 * cluster promotes a replica.  "tls": take the nodes' TLS ports.
 */
bool
rlock_cluster_map_from_shards(const RlockReply *reply, bool tls,
							  const char *seed_host, RlockClusterMap *map,
							  char *error, size_t errlen)
{
	int			s;

	cluster_reset(map);
	if (reply->type != RLOCK_REPLY_ARRAY)
	{
		snprintf(error, errlen, "CLUSTER SHARDS did not answer a list");
		return false;
	}
	for (s = 0; s < reply->elements; s++)
	{
		const RlockReply *shard = reply->element[s];
		const RlockReply *slots;
		const RlockReply *nodes;
		const RlockReply *primary = NULL;
		int			owner;
		int			i;

		if (shard->type != RLOCK_REPLY_ARRAY)
		{
			snprintf(error, errlen, "a shard that is not a list of fields");
			return false;
		}
		slots = cluster_field(shard, "slots");
		nodes = cluster_field(shard, "nodes");
		if (slots == NULL || nodes == NULL ||
			slots->type != RLOCK_REPLY_ARRAY ||
			nodes->type != RLOCK_REPLY_ARRAY || slots->elements % 2 != 0)
		{
			snprintf(error, errlen, "a shard without its slots and nodes");
			return false;
		}
		/*
		 * A primary that serves no slot yet is kept too: a slot migrating
		 * to it is ASKed there, and a redirection goes only to a node of
		 * the map.
		 */
		for (i = 0; i < nodes->elements; i++)
		{
			const RlockReply *node = nodes->element[i];
			const RlockReply *role;

			if (node->type != RLOCK_REPLY_ARRAY)
			{
				snprintf(error, errlen, "a node that is not a list of fields");
				return false;
			}
			role = cluster_field(node, "role");
			if (cluster_is_text(role) && strcmp(role->str, "master") == 0 &&
				cluster_node_healthy(node))
			{
				if (primary != NULL)
				{
					strlcpy(error, RLOCK_CLUSTER_SHARD_TWO_PRIMARIES, errlen);
					return false;
				}
				primary = node;
			}
		}
		if (primary == NULL)
			continue;			/* its slots are not served */
		owner = cluster_add_primary(map, cluster_field(primary, "endpoint"),
									cluster_port(cluster_field(primary,
															   tls ? "tls-port" : "port")),
									cluster_field(primary, "id"), seed_host,
									error, errlen);
		if (owner < 0)
			return false;
		for (i = 0; i < slots->elements; i += 2)
		{
			const RlockReply *a = slots->element[i];
			const RlockReply *b = slots->element[i + 1];

			if (a->type != RLOCK_REPLY_INTEGER || b->type != RLOCK_REPLY_INTEGER)
			{
				snprintf(error, errlen, "a slot that is not a number");
				return false;
			}
			if (!cluster_assign(map, a->integer, b->integer, owner, error,
								errlen))
				return false;
		}
	}
	return true;
}

/*
 * The map from a CLUSTER SLOTS reply: per range, its first and last
 * slot, then its primary as [endpoint, port, id, ...], then its
 * replicas.
 */
bool
rlock_cluster_map_from_slots(const RlockReply *reply, const char *seed_host,
							 RlockClusterMap *map, char *error, size_t errlen)
{
	int			r;

	cluster_reset(map);
	if (reply->type != RLOCK_REPLY_ARRAY)
	{
		snprintf(error, errlen, "CLUSTER SLOTS did not answer a list");
		return false;
	}
	for (r = 0; r < reply->elements; r++)
	{
		const RlockReply *range = reply->element[r];
		const RlockReply *primary;
		int			owner;

		if (range->type != RLOCK_REPLY_ARRAY || range->elements < 3 ||
			range->element[0]->type != RLOCK_REPLY_INTEGER ||
			range->element[1]->type != RLOCK_REPLY_INTEGER ||
			range->element[2]->type != RLOCK_REPLY_ARRAY ||
			range->element[2]->elements < 2)
		{
			snprintf(error, errlen, "a slot range that is not [first, last, primary, ...]");
			return false;
		}
		primary = range->element[2];
		owner = cluster_add_primary(map, primary->element[0],
									cluster_port(primary->element[1]),
									primary->elements >= 3 ?
									primary->element[2] : NULL,
									seed_host, error, errlen);
		if (owner < 0)
			return false;
		if (!cluster_assign(map, range->element[0]->integer,
							range->element[1]->integer, owner, error, errlen))
			return false;
	}
	return true;
}

/*
 * Read "<slot> <host>:<port>" after MOVED or ASK, as untrusted as the
 * map: a slot below 16384, a port from 1 to 65535, a host of printable
 * bytes that fits "hostsize".  The host may be empty (Redis does not
 * know the address it is reached by: "from_host", the one the reply came
 * from, is meant) and may hold colons (IPv6).  False if it is not so.
 */
bool
rlock_cluster_parse_redirect(const char *s, int len, const char *from_host,
							 int *slot, char *host, size_t hostsize,
							 int *port)
{
	const char *end = s + len;
	const char *p = s;
	const char *colon = NULL;
	const char *q;
	long		v = 0;

	if (p >= end || !isdigit((unsigned char) *p))
		return false;
	while (p < end && isdigit((unsigned char) *p) && v < RLOCK_CLUSTER_SLOTS)
		v = v * 10 + (*p++ - '0');
	if (v >= RLOCK_CLUSTER_SLOTS || p >= end || *p != ' ')
		return false;
	*slot = (int) v;
	p++;
	for (q = p; q < end; q++)
	{
		if (*q == ':')
			colon = q;
		else if (*q <= ' ' || *q > '~')
			return false;
	}
	if (colon == NULL || colon - p >= (long) hostsize || colon + 1 == end)
		return false;
	v = 0;
	for (q = colon + 1; q < end; q++)
	{
		if (!isdigit((unsigned char) *q) || v > 65535)
			return false;
		v = v * 10 + (*q - '0');
	}
	if (v < 1 || v > 65535)
		return false;
	*port = (int) v;
	if (colon == p)
		strlcpy(host, from_host, hostsize);
	else
	{
		memcpy(host, p, colon - p);
		host[colon - p] = '\0';
	}
	return true;
}
