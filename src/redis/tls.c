/*-------------------------------------------------------------------------
 *
 * tls.c
 *		The TLS transport, with OpenSSL: the same bytes as the plain
 *		transport, encrypted, over a non-blocking socket.
 *
 * rlock.tls names the checks as libpq's sslmode does: "require" encrypts
 * without checking the server's certificate, "verify-ca" checks that a
 * trusted CA signed it, "verify-full" also that it names the server
 * (rlock.tls_server_name, else the host connected to; an IP address is
 * checked against the certificate's IP addresses).  The host connected
 * to is rlock.host, or the address a Sentinel or a cluster's slot map
 * gave: without rlock.tls_server_name, verify-full proves only that the
 * certificate names that address, whoever gave it.  With it, every data
 * node (a cluster's seeds and primaries, the primary a Sentinel names)
 * must show a certificate for that one name: only the servers given such
 * a certificate may serve, wherever a map or a Sentinel points.  Trusted
 * CAs come from rlock.tls_ca_file, else from the system's store.  A
 * client certificate (rlock.tls_cert_file, rlock.tls_key_file) is sent
 * when the server asks for one.  TLS 1.2 or later; renegotiation off.
 * The context is built for the first connection after start or after a
 * reload, so changed files are read again on SIGHUP.
 *
 * OpenSSL on a non-blocking socket, as learnt the hard way by others:
 *
 * - a read or write may want the other direction (a key update, a
 *   post-handshake message): the transport says so in conn->io_want and
 *   the connection registers that event;
 * - a write that wanted to be retried must be retried with the same
 *   length; the buffer may move (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
 * - decrypted bytes can wait inside OpenSSL while the socket shows
 *   nothing to read: pending() tells the loop to read again at once;
 * - with TLS 1.3 a server that wants a client certificate refuses it
 *   after the handshake, at the first read: failures are described the
 *   same way whenever they come.
 *
 * Messages say what failed (a certificate not trusted and why, a name
 * that does not match, a server that does not speak TLS) and never
 * contain a secret.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/redis/tls.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "storage/latch.h"

#include "redis/redis_int.h"

typedef struct TlsState
{
	SSL		   *ssl;
	size_t		write_len;		/* an SSL_write to repeat with this
								 * length, 0 if none */
} TlsState;

/*
 * Built for the first connection after start or a reload that needs one,
 * one for each RlockTls mode (data nodes and Sentinels may differ).
 */
static SSL_CTX *tls_contexts[RLOCK_TLS_VERIFY_FULL + 1];

/*
 * After a reload: build the contexts anew for the next connections.
 * Connections open keep theirs.
 */
void
rlock_tls_reset(void)
{
	int			i;

	for (i = 0; i < lengthof(tls_contexts); i++)
	{
		if (tls_contexts[i] != NULL)
			SSL_CTX_free(tls_contexts[i]);
		tls_contexts[i] = NULL;
	}
}

/*
 * The text of the last OpenSSL error, or a fallback.
 */
static const char *
tls_error_text(unsigned long e)
{
	const char *reason = (e != 0) ? ERR_reason_error_string(e) : NULL;

	return reason ? reason : "no further information";
}

/*
 * Never ask a terminal for a key's passphrase: the worker has none.
 */
static int
tls_no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
	return 0;
}

/*
 * The private key file must not be readable by others, as libpq and the
 * server require (messages name the setting, not the path, which only
 * superusers may see): owned by us with no group or world access, or owned by
 * root and readable by its group at most.  stat() follows a symbolic
 * link: the file it names is the one checked and read.
 */
static bool
tls_check_key_file(RlockConn *conn, const char *path, const char *setting)
{
	struct stat st;

	if (stat(path, &st) != 0)
	{
		rlock_conn_set_error(conn, "could not access the private key file (%s): %m",
							 setting);
		return false;
	}
	if (!S_ISREG(st.st_mode))
	{
		rlock_conn_set_error(conn, "the private key file (%s) is not a regular file",
							 setting);
		return false;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0)
	{
		rlock_conn_set_error(conn,
							 "the private key file (%s) must be owned by the server's user or root",
							 setting);
		return false;
	}
	if ((st.st_uid == geteuid() && (st.st_mode & (S_IRWXG | S_IRWXO))) ||
		(st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IXGRP | S_IRWXO))))
	{
		rlock_conn_set_error(conn,
							 "the private key file (%s) has group or world access; it must be u=rw (0600) or less",
							 setting);
		return false;
	}
	return true;
}

/*
 * Load the client certificate and its key.
 */
static bool
tls_load_client_cert(RlockConn *conn, SSL_CTX *ctx)
{
	RlockServer *srv = conn->server;
	const char *key = srv->tls_key_file[0] ? srv->tls_key_file :
	srv->tls_cert_file;
	const char *key_setting = srv->tls_key_file[0] ? "rlock.tls_key_file" :
	"rlock.tls_cert_file";

	if (srv->tls_cert_file[0] == '\0')
	{
		if (srv->tls_key_file[0] == '\0')
			return true;
		rlock_conn_set_error(conn,
							 "rlock.tls_key_file is set but rlock.tls_cert_file is not");
		return false;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, srv->tls_cert_file) != 1)
	{
		rlock_conn_set_error(conn,
							 "could not load the certificate file (rlock.tls_cert_file): %s",
							 tls_error_text(ERR_get_error()));
		return false;
	}
	if (!tls_check_key_file(conn, key, key_setting))
		return false;
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
	{
		rlock_conn_set_error(conn, "could not load the private key file (%s): %s",
							 key_setting, tls_error_text(ERR_get_error()));
		return false;
	}
	if (SSL_CTX_check_private_key(ctx) != 1)
	{
		rlock_conn_set_error(conn,
							 "the private key file (%s) does not match the certificate file (rlock.tls_cert_file)",
							 key_setting);
		return false;
	}
	return true;
}

/*
 * Build the context from the settings.  NULL (with the reason in
 * conn->error) if a file cannot be used.
 */
static SSL_CTX *
tls_build_context(RlockConn *conn)
{
	RlockServer *srv = conn->server;
	SSL_CTX    *ctx;

	OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS |
					 OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL)
	{
		rlock_conn_set_error(conn, "could not create a TLS context: %s",
							 tls_error_text(ERR_get_error()));
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
					 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_passphrase);

	if (srv->tls == RLOCK_TLS_REQUIRE)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	else
	{
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		if (srv->tls_ca_file[0] != '\0' ?
			SSL_CTX_load_verify_locations(ctx, srv->tls_ca_file, NULL) != 1 :
			SSL_CTX_set_default_verify_paths(ctx) != 1)
		{
			if (srv->tls_ca_file[0] != '\0')
				rlock_conn_set_error(conn,
									 "could not load the CA file (rlock.tls_ca_file): %s",
									 tls_error_text(ERR_get_error()));
			else
				rlock_conn_set_error(conn,
									 "could not load the system's trusted CAs: %s",
									 tls_error_text(ERR_get_error()));
			SSL_CTX_free(ctx);
			return NULL;
		}
	}
	if (!tls_load_client_cert(conn, ctx))
	{
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/*
 * The name the server's certificate must carry, and the one sent as SNI.
 */
static const char *
tls_server_name(RlockServer *srv)
{
	return srv->tls_server_name[0] ? srv->tls_server_name : srv->host;
}

/*
 * Set up the TLS state of a connection whose socket just connected.
 */
static bool
tls_setup(RlockConn *conn)
{
	RlockServer *srv = conn->server;
	const char *name = tls_server_name(srv);
	bool		numeric = rlock_is_numeric_host(name);
	TlsState   *st;
	SSL		   *ssl;

	Assert(srv->tls > RLOCK_TLS_OFF && srv->tls < lengthof(tls_contexts));
	if (tls_contexts[srv->tls] == NULL)
		tls_contexts[srv->tls] = tls_build_context(conn);
	if (tls_contexts[srv->tls] == NULL)
		return false;

	ERR_clear_error();
	ssl = SSL_new(tls_contexts[srv->tls]);
	if (ssl == NULL || SSL_set_fd(ssl, conn->sock) != 1)
	{
		rlock_conn_set_error(conn, "could not set up TLS: %s",
							 tls_error_text(ERR_get_error()));
		if (ssl != NULL)
			SSL_free(ssl);
		return false;
	}
	SSL_set_connect_state(ssl);
	if (!numeric)
		(void) SSL_set_tlsext_host_name(ssl, name);
	if (srv->tls == RLOCK_TLS_VERIFY_FULL)
	{
		X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
		int			ok;

		if (numeric)
			ok = X509_VERIFY_PARAM_set1_ip_asc(param, name);
		else
		{
			X509_VERIFY_PARAM_set_hostflags(param,
											X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
			ok = X509_VERIFY_PARAM_set1_host(param, name, 0);
		}
		if (ok != 1)
		{
			rlock_conn_set_error(conn, "invalid TLS server name \"%s\"", name);
			SSL_free(ssl);
			return false;
		}
	}

	st = MemoryContextAllocZero(conn->cxt, sizeof(TlsState));
	st->ssl = ssl;
	conn->tls = st;
	return true;
}

/*
 * The server closed the connection.  Right after the TLS handshake, before
 * answering anything, that is most likely a refused (or missing) client
 * certificate: with TLS 1.3 the server's alert comes after the handshake,
 * and may be lost when our first write meets the closed socket.
 */
static void
tls_describe_close(RlockConn *conn)
{
	if (conn->state == RLOCK_CONN_SECURING)
		rlock_conn_set_error(conn,
							 "server closed the connection during the TLS handshake");
	else if (rlock_conn_unanswered(conn))
		rlock_conn_set_error(conn,
							 conn->server->tls_cert_file[0] == '\0' ?
							 "server closed the connection right after the TLS handshake (does it require a client certificate? see rlock.tls_cert_file)" :
							 "server closed the connection right after the TLS handshake (was the client certificate refused?)");
	else
		rlock_conn_set_error(conn, "server closed the connection");
}

/*
 * Say why an OpenSSL call failed, in conn->error.
 */
static void
tls_describe_failure(RlockConn *conn, int ssl_error)
{
	TlsState   *st = (TlsState *) conn->tls;
	unsigned long e = ERR_peek_last_error();
	int			reason = ERR_GET_REASON(e);
	long		verify;

	switch (ssl_error)
	{
		case SSL_ERROR_ZERO_RETURN:
			tls_describe_close(conn);
			return;
		case SSL_ERROR_SYSCALL:
			if (errno == 0 || errno == ECONNRESET || errno == EPIPE)
				tls_describe_close(conn);
			else
				rlock_conn_set_error(conn, "TLS connection failed: %m");
			return;
		default:
			break;
	}

	if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED)
	{
		verify = SSL_get_verify_result(st->ssl);
		if (verify == X509_V_ERR_HOSTNAME_MISMATCH ||
			verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
			rlock_conn_set_error(conn,
								 "certificate verify failed: the server's certificate does not name \"%s\"",
								 tls_server_name(conn->server));
		else
			rlock_conn_set_error(conn, "certificate verify failed: %s",
								 X509_verify_cert_error_string(verify));
	}
	else if (conn->state == RLOCK_CONN_SECURING &&
			 (reason == SSL_R_WRONG_VERSION_NUMBER ||
			  reason == SSL_R_PACKET_LENGTH_TOO_LONG))
		rlock_conn_set_error(conn,
							 "the server does not speak TLS on this port (%s)",
							 tls_error_text(e));
	else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
			 reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
		rlock_conn_set_error(conn,
							 "the server requires a client certificate (rlock.tls_cert_file)");
	else if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)
		tls_describe_close(conn);
	else
		rlock_conn_set_error(conn, "TLS failed: %s", tls_error_text(e));
}

/*
 * After an OpenSSL call that did not complete: wait (0, conn->io_want
 * set) or fail (-1, conn->error set).
 */
static int
tls_not_done(RlockConn *conn, int rc)
{
	TlsState   *st = (TlsState *) conn->tls;
	int			err = SSL_get_error(st->ssl, rc);

	switch (err)
	{
		case SSL_ERROR_WANT_READ:
			conn->io_want = WL_SOCKET_READABLE;
			return 0;
		case SSL_ERROR_WANT_WRITE:
			conn->io_want = WL_SOCKET_WRITEABLE;
			return 0;
		default:
			tls_describe_failure(conn, err);
			ERR_clear_error();
			return -1;
	}
}

static RlockOpen
tls_open(RlockConn *conn)
{
	TlsState   *st;
	int			rc;

	if (conn->tls == NULL && !tls_setup(conn))
		return RLOCK_OPEN_FAILED;
	st = (TlsState *) conn->tls;
	ERR_clear_error();
	errno = 0;
	rc = SSL_connect(st->ssl);
	if (rc == 1)
		return RLOCK_OPEN_DONE;
	return tls_not_done(conn, rc) == 0 ? RLOCK_OPEN_WAIT : RLOCK_OPEN_FAILED;
}

static ssize_t
tls_read(RlockConn *conn, char *buf, size_t len)
{
	TlsState   *st = (TlsState *) conn->tls;
	int			n;

	ERR_clear_error();
	errno = 0;
	n = SSL_read(st->ssl, buf, (int) Min(len, INT_MAX));
	if (n > 0)
		return n;
	return tls_not_done(conn, n);
}

static ssize_t
tls_write(RlockConn *conn, const char *buf, size_t len)
{
	TlsState   *st = (TlsState *) conn->tls;
	int			n;

	/* a write OpenSSL asked to repeat goes again with the same length */
	if (st->write_len > 0)
	{
		Assert(len >= st->write_len);
		len = st->write_len;
	}
	ERR_clear_error();
	errno = 0;
	n = SSL_write(st->ssl, buf, (int) Min(len, INT_MAX));
	if (n > 0)
	{
		st->write_len = 0;
		return n;
	}
	st->write_len = len;
	return tls_not_done(conn, n);
}

static bool
tls_pending(RlockConn *conn)
{
	TlsState   *st = (TlsState *) conn->tls;

	return conn->state >= RLOCK_CONN_HANDSHAKE && SSL_pending(st->ssl) > 0;
}

/*
 * Free the TLS state.  An orderly close says so to the server
 * (close_notify); a failed one just goes.
 */
static void
tls_close(RlockConn *conn)
{
	TlsState   *st = (TlsState *) conn->tls;

	if (!conn->failed && conn->state >= RLOCK_CONN_HANDSHAKE)
	{
		ERR_clear_error();
		(void) SSL_shutdown(st->ssl);
	}
	SSL_free(st->ssl);
	ERR_clear_error();
	pfree(st);
	conn->tls = NULL;
}

const RlockTransport rlock_transport_tls = {
	tls_open,
	tls_read,
	tls_write,
	tls_pending,
	tls_close
};
