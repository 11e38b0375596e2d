/*-------------------------------------------------------------------------
 *
 * wire.c
 *		What crosses one connection: commands queued and written, replies
 *		read and handed to the commands they answer.
 *
 * A command is queued on the connection's output buffer in RESP
 * (args.c) and on its list of commands in flight, in send order; nothing
 * is written until the loop flushes, so the commands queued in one pass
 * of the worker go out in one write.  A connection takes no more while
 * RLOCK_OUT_MAX bytes wait to be written (a Redis that stopped reading):
 * senders keep their commands for later, as when there is no connection.
 *
 * Replies are dispatched in order: each answers the oldest command of its
 * connection, and must fit the shape that command expects (redis.h).  A
 * reply with no command, one that does not fit, a push of an unexpected
 * shape, or bytes the reader refuses (reply.c, which also keeps the
 * replies of all connections within one budget) is a protocol violation:
 * the connection is marked failed and dropped at the next tick, and every
 * command on it is answered with NULL, which its sender treats like any
 * lost reply.  Each cause is logged the first time only (status.c).
 *
 * What a reply means beyond its command is for whoever made the
 * connection, through its hooks (RlockConnHooks): a published message, a
 * shard channel Redis dropped by itself, an error a Redis Cluster
 * redirects, the refusal of a server turned replica.  This file calls
 * none of their files.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/wire.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/redis_int.h"

/* Bytes read per call, and calls per connection per wake-up */
#define RLOCK_READ_CHUNK		(64 * 1024)
#define RLOCK_READS_PER_WAKE	16

/* The output buffer is compacted once this much of it was written */
#define RLOCK_OUT_COMPACT		(64 * 1024)

static char *read_buf = NULL;

/*---- state ----*/

/*
 * Can the connection take a command now: is it up, and is Redis reading
 * what it was sent?
 */
static bool
conn_writable(RlockConn *conn)
{
	return !conn->failed && conn->state >= RLOCK_CONN_HANDSHAKE &&
		conn->out.len - conn->out_pos <= RLOCK_OUT_MAX;
}

/*
 * Can the connection take the worker's commands now?
 */
bool
rlock_conn_ready(RlockConn *conn)
{
	return conn->state == RLOCK_CONN_READY && conn_writable(conn);
}

/*---- sending ----*/

/*
 * A command's bytes are in the output buffer: it waits for its answer,
 * after those sent before it.
 */
static void
conn_queued(RlockConn *conn, RlockCmd *cmd)
{
	cmd->sent_at = GetCurrentTimestamp();
	cmd->send_seq = ++conn->sends;
	conn->last_sent_at = cmd->sent_at;
	dlist_push_tail(&conn->inflight, &cmd->node);
}

/*
 * Queue a command.  False if the connection cannot take it (the caller
 * keeps the command).  Nothing is written until rlock_redis_flush() or
 * the next writeable event, so commands queued in one pass of the worker
 * go out in one write.
 */
bool
rlock_conn_send(RlockConn *conn, RlockCmd *cmd, const RlockArgs *args)
{
	int			start = conn->out.len;

	if (!conn_writable(conn))
		return false;
	Assert(conn->out_pos >= 0 && conn->out_pos <= conn->out.len);
	/* a Redis Cluster primary's connection in use is kept */
	if (conn->node != NULL && !cmd->internal)
		conn->used_at = GetCurrentTimestamp();
	rlock_args_format(args, &conn->out);

	/* a cluster may redirect it: keep it as sent */
	cmd->wire = NULL;
	cmd->redirects = 0;
	cmd->asked = false;
	cmd->unsent = false;
	cmd->reply_refused = false;
	if (conn->node != NULL && conn->state == RLOCK_CONN_READY &&
		!cmd->internal)
	{
		cmd->wirelen = conn->out.len - start;
		cmd->wire = MemoryContextAlloc(rlock_redis_context, cmd->wirelen);
		memcpy(cmd->wire, conn->out.data + start, cmd->wirelen);
	}
	conn_queued(conn, cmd);
	return true;
}

/*
 * Queue a command again, as it was sent before on another connection (a
 * redirection).  False if the connection cannot take it now.
 */
bool
rlock_conn_resend(RlockConn *conn, RlockCmd *cmd)
{
	/* the output bound was checked by the caller, before an ASKING that
	 * must not go out without this */
	if (conn->failed || conn->state != RLOCK_CONN_READY || cmd->wire == NULL)
		return false;
	Assert(cmd->wirelen > 0);
	appendBinaryStringInfo(&conn->out, cmd->wire, cmd->wirelen);
	conn_queued(conn, cmd);
	return true;
}

/*
 * Hand a command its reply (NULL: lost), which ends it here.
 */
void
rlock_conn_answer(RlockConn *conn, RlockCmd *cmd, const RlockReply *reply)
{
	if (cmd->wire != NULL)
	{
		pfree(cmd->wire);
		cmd->wire = NULL;
	}
	cmd->done(conn, cmd, reply);
}

/*
 * Write as much of the output buffer as the socket takes.
 */
static void
conn_write(RlockConn *conn)
{
	while (conn->out_pos < conn->out.len)
	{
		ssize_t		n;

		Assert(conn->out_pos >= 0);
		conn->io_want = 0;
		n = conn->transport->write(conn, conn->out.data + conn->out_pos,
								   conn->out.len - conn->out_pos);
		if (n < 0)
		{
			rlock_conn_give_up(conn, NULL); /* the transport said why */
			return;
		}
		if (n == 0)
			return;				/* conn->io_want says what for */
		Assert(n <= conn->out.len - conn->out_pos);
		conn->out_pos += n;
	}
	conn->io_want = 0;
	conn->out.len = 0;
	conn->out.data[0] = '\0';
	conn->out_pos = 0;
}

/*
 * Drop what was written from the front of a large output buffer.
 */
static void
conn_compact(RlockConn *conn)
{
	Assert(conn->out_pos >= 0 && conn->out_pos <= conn->out.len);
	if (conn->out_pos < RLOCK_OUT_COMPACT ||
		conn->out_pos < conn->out.len / 2)
		return;
	memmove(conn->out.data, conn->out.data + conn->out_pos,
			conn->out.len - conn->out_pos);
	conn->out.len -= conn->out_pos;
	conn->out.data[conn->out.len] = '\0';
	conn->out_pos = 0;
}

/*
 * Write what the connection has queued, as much as the socket takes now.
 */
void
rlock_wire_flush(RlockConn *conn)
{
	if (conn->failed || conn->out_pos >= conn->out.len)
		return;
	conn_write(conn);
	conn_compact(conn);
}

/*---- receiving ----*/

/*
 * A reply on a subscriber connection that is no answer: a published
 * message, or a push rlock never asked for.  True if handled.
 */
static bool
conn_dispatch_push(RlockConn *conn, RlockReply *reply)
{
	char		what[64];
	char		detail[128];

	switch (rlock_reply_pubsub_frame(reply))
	{
		case RLOCK_FRAME_REPLY:
			return false;
		case RLOCK_FRAME_SUNSUBSCRIBE:
			{
				const RlockReply *ch = reply->element[1];
				RlockCmd   *head = dlist_is_empty(&conn->inflight) ? NULL :
					dlist_head_element(RlockCmd, node, &conn->inflight);

				/* the confirmation of our own SUNSUBSCRIBE */
				if (head != NULL && head->shape == RLOCK_SHAPE_SUNSUBSCRIBE &&
					head->channellen == ch->len &&
					memcmp(head->channel, ch->str, ch->len) == 0)
					return false;
				/* Redis's own: the channel's slot left this node */
				if (conn->hooks->unsubscribed != NULL)
					conn->hooks->unsubscribed(conn, ch->str, ch->len);
				return true;
			}
		case RLOCK_FRAME_INVALIDATE:
			if (conn->hooks->invalidated == NULL)
			{
				rlock_conn_violation(conn, RLOCK_VIOLATION_PUBSUB,
									 "an invalidation message no tracking asked for");
				return true;
			}
			conn->hooks->invalidated(conn,
									 reply->element[2]->type == RLOCK_REPLY_NIL ?
									 NULL : reply->element[2]);
			return true;
		case RLOCK_FRAME_MESSAGE:
			conn->hooks->message(conn, reply->element[1]->str,
								 reply->element[1]->len,
								 reply->element[2]->str,
								 reply->element[2]->len);
			return true;
		case RLOCK_FRAME_MALFORMED:
			rlock_reply_describe(reply, what, sizeof(what));
			snprintf(detail, sizeof(detail),
					 "a published message of an unexpected shape (%s)", what);
			rlock_conn_violation(conn, RLOCK_VIOLATION_PUBSUB, detail);
			return true;
	}
	return false;
}

/*
 * Is this a refusal only a replica gives: a write (READONLY), or WAIT?
 */
static bool
conn_says_replica(const RlockReply *reply)
{
	static const char wait_on_replica[] = "ERR WAIT cannot be used with replica";

	return reply->type == RLOCK_REPLY_ERROR &&
		(strncmp(reply->str, "READONLY", 8) == 0 ||
		 strncmp(reply->str, wait_on_replica,
				 sizeof(wait_on_replica) - 1) == 0);
}

/*
 * One reply read from a connection: hand it to the command it answers.
 */
static void
conn_dispatch(RlockConn *conn, RlockReply *reply)
{
	RlockCmd   *cmd;
	bool		readonly;
	bool		moved;
	char		what[64];
	char		detail[256];

	if (conn->subscriber && conn_dispatch_push(conn, reply))
		return;
	if (dlist_is_empty(&conn->inflight))
	{
		rlock_reply_describe(reply, what, sizeof(what));
		snprintf(detail, sizeof(detail),
				 "a reply with no command waiting for it (%s)", what);
		rlock_conn_violation(conn, RLOCK_VIOLATION_UNSOLICITED, detail);
		return;
	}
	cmd = dlist_head_element(RlockCmd, node, &conn->inflight);
	if (!rlock_reply_fits(reply, cmd->shape, cmd->nelements))
	{
		rlock_reply_describe(reply, what, sizeof(what));
		snprintf(detail, sizeof(detail),
				 "a reply of the wrong shape (%s) to a command", what);
		rlock_conn_violation(conn, RLOCK_VIOLATION_SHAPE, detail);
		return;
	}
	dlist_delete(&cmd->node);
	if (conn->use == RLOCK_USE_COMMAND)
		pg_atomic_write_u64(&rlock_shared->cmd_reply_at,
							(uint64) GetCurrentTimestamp());
	readonly = conn_says_replica(reply);

	/* a Redis Cluster's redirections are its router's */
	if (reply->type == RLOCK_REPLY_ERROR && !readonly &&
		conn->hooks->redirect != NULL &&
		conn->hooks->redirect(conn, cmd, reply))
		return;

	/*
	 * Behind Sentinels, or in a Redis Cluster, a replica's refusal means
	 * the primary moved: the command did not run, and is answered as lost
	 * with its connection, to be sent again to the primary named next.
	 */
	moved = readonly && conn->hooks->demoted != NULL &&
		conn->hooks->demoted(conn);
	rlock_conn_answer(conn, cmd, moved ? NULL : reply);

	/*
	 * The server turned replica (a failover, a DNS name that points
	 * elsewhere now): connect again, resolving the name afresh, rather
	 * than be refused every write.
	 */
	if (readonly)
		rlock_conn_give_up(conn, "the server is a read-only replica now");
}

/*
 * The reader refused what the connection sent, or gave up its reply to
 * keep the worker within RLOCK_REPLY_BUDGET while another connection
 * read: drop the connection.  Outside pub/sub, the bytes refused were
 * the reply to the oldest command: its sender is told, with the NULL it
 * gets as the connection closes.
 */
void
rlock_wire_refused(RlockConn *conn)
{
	char		fault[256];
	char		detail[RLOCK_DETAIL_LEN];

	if (!conn->subscriber && !dlist_is_empty(&conn->inflight))
		dlist_head_element(RlockCmd, node, &conn->inflight)->reply_refused = true;
	rlock_reader_describe_fault(conn->reader, fault, sizeof(fault));
	snprintf(detail, sizeof(detail), "a reply rlock does not accept: %s",
			 fault);
	rlock_conn_violation(conn,
						 conn->reader->fault == RLOCK_READER_BUDGET ?
						 RLOCK_VIOLATION_BUDGET : RLOCK_VIOLATION_READER,
						 detail);
}

/*
 * Read what the socket has, up to a bound per wake-up (a server flooding
 * the connection must not keep the worker from everything else), and
 * dispatch every complete reply.
 */
static void
conn_read(RlockConn *conn)
{
	int			i;

	if (read_buf == NULL)
		read_buf = MemoryContextAlloc(rlock_redis_context, RLOCK_READ_CHUNK);
	conn->read_more = false;
	for (i = 0; i < RLOCK_READS_PER_WAKE; i++)
	{
		ssize_t		n;
		RlockReply *reply;
		int			rc;

		conn->io_want = 0;
		n = conn->transport->read(conn, read_buf, RLOCK_READ_CHUNK);
		if (n < 0)
		{
			rlock_conn_give_up(conn, NULL); /* the transport said why */
			return;
		}
		if (n == 0)
			return;
		Assert(n <= RLOCK_READ_CHUNK);
		if (!rlock_reader_feed(conn->reader, read_buf, n))
			break;

		/*
		 * Every reply ends with CRLF: without a newline in the new bytes
		 * none can be complete, and asking the parser would make it scan
		 * everything buffered again (a line dripped in byte by byte would
		 * cost quadratic time).
		 */
		if (memchr(read_buf, '\n', n) == NULL)
		{
			if (!rlock_reader_check_pending(conn->reader))
				break;
		}
		else
		{
			while ((rc = rlock_reader_next(conn->reader, &reply)) > 0)
			{
				conn->partial_since = 0;
				conn_dispatch(conn, reply);
				rlock_reply_free(reply);
				if (conn->failed)
					return;
			}
			if (rc < 0)
				break;
		}

		/*
		 * A short read emptied the socket: asking again would only hear
		 * EAGAIN, a system call per wake-up.  The wait set watches the
		 * socket level-triggered, so bytes that arrive meanwhile wake the
		 * loop at once; bytes TLS decrypted ahead are not in the socket,
		 * so they are read now.
		 */
		if (n < RLOCK_READ_CHUNK && !conn->transport->pending(conn))
		{
			conn->io_want = WL_SOCKET_READABLE;
			return;
		}
	}
	if (conn->reader->fault != RLOCK_READER_OK)
	{
		rlock_wire_refused(conn);
		return;
	}
	conn->read_more = true;		/* the bound was reached */
}

/*
 * After a read: a reply left incomplete starts its clock (conn.c drops
 * the connection when it runs out) unless it had started already.
 */
static void
conn_note_partial(RlockConn *conn)
{
	if (conn->reader == NULL || !rlock_reader_partial(conn->reader))
		conn->partial_since = 0;
	else if (conn->partial_since == 0)
		conn->partial_since = GetCurrentTimestamp();
}

/*
 * The socket of a connection is ready (or a transport buffers bytes):
 * move the connection on.
 */

/*
 * The socket is ready for reading (or the transport holds bytes): read
 * and dispatch what came, then write what the replies made the senders
 * queue.
 */
void
rlock_wire_read(RlockConn *conn)
{
	Assert(conn->state == RLOCK_CONN_HANDSHAKE ||
		   conn->state == RLOCK_CONN_READY);
	conn_read(conn);
	if (!conn->failed)
		conn_note_partial(conn);
	rlock_wire_flush(conn);
}
