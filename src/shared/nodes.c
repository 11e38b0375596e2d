/*-------------------------------------------------------------------------
 *
 * nodes.c
 *		The list of Redis nodes in rlock.nodes: "host:port" entries
 *		separated by commas, an IPv6 address in brackets ("[::1]:26379").
 *
 * Parsed by the setting's check (in every process that reads the
 * configuration) and by the worker, so a list the worker sees was
 * accepted before.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/shared/nodes.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "rlock.h"

/*
 * Parse one entry of the list, from "start" to "end" (trimmed, not
 * empty), into "node".  False, with the reason in "error", if it is not a
 * node.
 */
static bool
nodes_parse_entry(const char *start, const char *end, RlockNodeAddr *node,
				  char *error, size_t errorlen)
{
	/* an entry is quoted in a message up to a length that leaves room */
	int			shown = (int) Min(end - start, 64);
	const char *host;
	size_t		hostlen;
	const char *colon;
	long		port;
	char	   *portend;

	if (*start == '[')
	{
		const char *close = memchr(start, ']', end - start);

		if (close == NULL || close + 1 >= end || close[1] != ':')
		{
			snprintf(error, errorlen,
					 "\"%.*s\" is not of the form [address]:port",
					 shown, start);
			return false;
		}
		host = start + 1;
		hostlen = close - host;
		colon = close + 1;
	}
	else
	{
		colon = NULL;
		for (host = start; host < end; host++)
			if (*host == ':')
				colon = host;
		host = start;
		if (colon == NULL)
		{
			snprintf(error, errorlen,
					 "\"%.*s\" names no port: write host:port",
					 shown, start);
			return false;
		}
		if (memchr(start, ':', colon - start) != NULL)
		{
			snprintf(error, errorlen,
					 "\"%.*s\": write an IPv6 address in brackets, as [::1]:26379",
					 shown, start);
			return false;
		}
		hostlen = colon - start;
	}
	if (hostlen == 0 || hostlen >= sizeof(node->host))
	{
		snprintf(error, errorlen, "\"%.*s\" has %s host name",
				 shown, start,
				 hostlen == 0 ? "an empty" : "too long a");
		return false;
	}
	for (size_t i = 0; i < hostlen; i++)
	{
		if (isspace((unsigned char) host[i]) || host[i] == '\0' ||
			host[i] == '[' || host[i] == ']' || host[i] == ',')
		{
			snprintf(error, errorlen,
					 "\"%.*s\" has a character that cannot be in a host name",
					 shown, start);
			return false;
		}
	}
	errno = 0;
	port = strtol(colon + 1, &portend, 10);
	if (colon + 1 == end || portend != end || errno != 0 ||
		!isdigit((unsigned char) colon[1]) || port < 1 || port > 65535)
	{
		snprintf(error, errorlen,
				 "\"%.*s\" has no valid port (1 to 65535)",
				 shown, start);
		return false;
	}
	memcpy(node->host, host, hostlen);
	node->host[hostlen] = '\0';
	node->port = (int) port;
	return true;
}

/*
 * Parse "list" into at most "max" nodes.  Returns how many there are (0
 * for an empty list), or -1 with the reason in "error".
 */
int
rlock_parse_nodes(const char *list, RlockNodeAddr *nodes, int max,
				  char *error, size_t errorlen)
{
	const char *p = list;
	int			n = 0;
	bool		after_comma = false;

	while (*p != '\0')
	{
		const char *start;
		const char *end;
		RlockNodeAddr node;

		while (isspace((unsigned char) *p))
			p++;
		if (*p == '\0')
			break;
		start = p;
		end = strchr(p, ',');
		if (end == NULL)
			end = p + strlen(p);
		after_comma = (*end == ',');
		p = after_comma ? end + 1 : end;
		while (end > start && isspace((unsigned char) end[-1]))
			end--;
		if (end == start)
		{
			snprintf(error, errorlen, "the list has an empty entry");
			return -1;
		}
		if (!nodes_parse_entry(start, end, &node, error, errorlen))
			return -1;
		if (n == max)
		{
			snprintf(error, errorlen, "the list names more than %d nodes",
					 max);
			return -1;
		}
		nodes[n++] = node;
	}
	if (after_comma)
	{
		snprintf(error, errorlen, "the list ends with a comma");
		return -1;
	}
	return n;
}

/*
 * "host:port", or "[host]:port" for an IPv6 address, for messages.
 */
void
rlock_format_address(char *buf, size_t size, const char *host, int port)
{
	if (strchr(host, ':') != NULL)
		snprintf(buf, size, "[%s]:%d", host, port);
	else
		snprintf(buf, size, "%s:%d", host, port);
}
