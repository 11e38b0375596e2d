# TLS with Debian's redis-server and certificates made by openssl in the
# test (RlockTest::TLS): verify-full works, by IP address and by name; a
# certificate signed by another CA is refused, and so is one that does
# not name the server under verify-full (verify-ca accepts it, require
# checks nothing); a server that requires client certificates, with and
# without one, and a key file others can read; plain TCP against the TLS
# port and TLS against the plain port; keys and messages larger than a
# TLS record; a Unix socket (no TLS there, and the log says so); a
# restart of Redis.  Every failure says what failed, in the
# 58030 detail and in rlock_status(), and never shows a secret.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start(tls => 1);
my $mtls = RlockTest::Redis->start(tls => { auth_clients => 'yes' });
my $certs = $redis->certs;
my $node = RlockTest::node('tls', $redis,
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => [ 'rlock.max_key_length = 65535', "rlock.tls = 'verify-full'",
		"rlock.tls_ca_file = '$certs->{ca}'" ]);

sub timed_psql { return RlockTest::timed_psql($node, @_) }

sub status
{
	return $node->safe_psql('postgres',
		"SELECT command_connection || ' ' || coalesce(last_error, '') FROM rlock_status()"
	);
}

# Point rlock somewhere else: each key => value becomes a setting.
sub reconf
{
	my (%set) = @_;
	$node->append_conf('postgresql.conf',
		join('', map { "rlock.$_ = '$set{$_}'\n" } sort keys %set));
	$node->reload;
}

# After reconf, wait until the command connection is ready again.
sub works
{
	my ($what) = @_;
	ok(RlockTest::wait_for_redis($node, 10), $what) or diag(status());
}

# After reconf, the next statement fails with 58030 and a detail saying
# why, which rlock_status() shows too.
sub refused
{
	my ($what, $why) = @_;
	ok(RlockTest::wait_until(sub { status() =~ /^(down|securing|handshake) .*$why/ }, 10),
		"$what: rlock_status() says why") or diag(status());
	my ($rc, $out, $err, $elapsed) = timed_psql("SELECT rlock_try('tls:refused')");
	like($err, qr/ERROR:  58030: could not reach Redis/, "$what: 58030");
	like($err, qr/DETAIL:  No usable connection to Redis at [^:]+:\d+: .*$why/,
		"$what: the detail says why");
	cmp_ok($elapsed, '<', 1 + 0.5, "$what: within rlock.connect_timeout");
}

#---- it works ----

works('verify-full by IP address');
like(status(), qr/^ready/, 'the command connection is ready');
my $s = $node->background_psql('postgres');
is($s->query_safe("SELECT rlock_session_try('tls:a'), rlock_held('tls:a')"),
	't|1', 'a lock over TLS');
is($redis->cmd('EXISTS', 'tls:a'), 1, 'is in Redis');
is($s->query_safe("SELECT rlock_session_release('tls:a')"), 't', 'and released');
is($redis->cmd('EXISTS', 'tls:a'), 0, 'is gone from Redis');

# a waiter woken by a foreign unlock: a message read over TLS
sub foreign_hold
{
	my ($key) = @_;
	$redis->cmd('HSET', $key, 'dead0000-1111-4222-8333-444455556666:1', 1);
	$redis->cmd('PEXPIRE', $key, 60_000);
}

sub foreign_unlock
{
	my ($key) = @_;
	$redis->cmd('DEL', $key);
	$redis->cmd('PUBLISH', 'redisson_lock__channel:{' . $key . '}', '0');
}

foreign_hold('tls:w');
my $w = $node->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($w, "SELECT rlock_try('tls:w', '20s');");
ok(RlockTest::wait_for_subscribers($redis, 'tls:w', 1, 5),
	'a waiter subscribes over TLS');
my $t0 = time;
foreign_unlock('tls:w');
my ($out) = RlockTest::collect($w);
is($out, 't', 'and is woken by the unlock message');
cmp_ok(time - $t0, '<', 5, 'at once, not at the lease end');

# larger than a TLS record both ways: a 60,000-byte key in the command,
# and its 60,000-byte channel in the message that wakes the waiter
my $long = 'tls:' . ('k' x 60_000);
foreign_hold($long);
RlockTest::send_query($w, "SELECT rlock_try('$long', '20s');");
ok(RlockTest::wait_for_subscribers($redis, $long, 1, 5),
	'a waiter on a 60,000-byte key subscribes');
$t0 = time;
foreign_unlock($long);
($out) = RlockTest::collect($w);
is($out, 't', 'and is woken by a message larger than a TLS record');
cmp_ok(time - $t0, '<', 5, 'at once');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $long) == 0 }),
	'its release went out whole');
$w->quit;

#---- refusals ----

reconf(tls_ca_file => $certs->{other_ca});
refused('a certificate signed by another CA',
	qr/certificate verify failed: (unable to get local issuer certificate|self-signed certificate in certificate chain)/
);

reconf(tls_ca_file => $certs->{ca}, tls_server_name => 'redis.example.com');
refused('verify-full, a certificate that does not name the server',
	qr/certificate verify failed: the server's certificate does not name "redis\.example\.com"/
);

reconf(tls => 'verify-ca');
works('verify-ca accepts the certificate whatever name it carries');

reconf(tls => 'require', tls_ca_file => $certs->{other_ca});
works('require checks nothing');

reconf(tls => 'verify-full', tls_ca_file => $certs->{ca},
	tls_server_name => '', host => 'localhost');
works('verify-full by host name');

#---- client certificates ----

reconf(port => $mtls->tls_port);
refused('a server that requires a client certificate, without one',
	qr/(the server requires a client certificate|does it require a client certificate\?) .*rlock\.tls_cert_file/
);

reconf(tls_cert_file => $certs->{client_crt},
	tls_key_file => $certs->{client_key});
works('with one');

# key and certificate files are read again after a reload
chmod 0644, $certs->{client_key};
$node->reload;
$mtls->cmd('CLIENT', 'KILL', 'TYPE', 'normal');
refused('a private key file others can read',
	qr/the private key file \(rlock.tls_key_file\) has group or world access/);
chmod 0600, $certs->{client_key};
$node->reload;
works('once the key file is private again');

#---- ports mixed up ----

reconf(port => $redis->tls_port, tls => 'off', tls_cert_file => '',
	tls_key_file => '');
refused('plain TCP against the TLS port',
	qr/server closed the connection before answering \(if it requires TLS, set rlock\.tls\)/
);

reconf(port => $redis->port, tls => 'verify-full');
# Redis 7.0 waits for the end of a line that the ClientHello never
# sends, so the handshake times out; Redis 8 answers it at once, which
# OpenSSL reads as not TLS
refused('TLS against the plain port',
	qr/timed out during the TLS handshake \(does the server speak TLS on this port\?\)|the server does not speak TLS on this port \(wrong version number\)/
);

#---- a Unix socket: TLS does not apply, as with libpq's sslmode ----

my $sockdir = PostgreSQL::Test::Utils::tempdir;
my $local = RlockTest::Redis->start(tls => 0,
	args => [ '--unixsocket', "$sockdir/redis.sock", '--unixsocketperm', '700' ]);
reconf(unix_socket => "$sockdir/redis.sock");
works('a Unix socket with rlock.tls set');
ok(defined $local->client_id('rlock_command'),
	'the command connection is to the server on that socket');
ok( RlockTest::wait_until(
		sub {
			slurp_file($node->logfile) =~
			  m{rlock reaches Redis by the Unix socket "\Q$sockdir\E/redis.sock" without TLS};
		},
		5),
	'and the log says that TLS is not used there');
reconf(unix_socket => '');
$local->stop;

#---- a restart ----

reconf(port => $redis->tls_port);
works('back on the TLS port');
$s->query_safe("SELECT rlock_session_try('tls:r')");
my $reconnects = $node->safe_psql('postgres', 'SELECT reconnects FROM rlock_stats');
$redis->restart;
works('Redis restarted: reconnected over TLS');
cmp_ok($node->safe_psql('postgres', 'SELECT reconnects FROM rlock_stats'),
	'>', $reconnects, 'counted as a reconnection');
is($s->query_safe("SELECT rlock_session_try('tls:r2')"), 't',
	'locks work after the restart');
$s->quit;

#---- no secret in the log ----

my $key = slurp_file($certs->{client_key});
my ($line) = grep { !/^-----/ && length > 20 } split /\n/, $key;
my $log = slurp_file($node->logfile);
unlike($log, qr/\Q$line\E/, 'the private key never appears in the log');
like($log, qr/certificate verify failed/, 'the failures do');

$node->stop;
done_testing();
