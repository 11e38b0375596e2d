# Redis saying no: its script cache flushed (renewals go on, a release
# still reports the truth, a flush right after a new connection is
# survived), busy with another client's script (a refused release is sent
# again), a lock that has no expiry (waiters look again), an ACL user that
# may not SUBSCRIBE (no reconnection storm, waiters are still served, and
# once the ACL allows it, waiters subscribe again), and a primary that
# turned replica (READONLY: the worker connects again).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use Time::HiRes qw(time);

my $redis = RlockTest::Redis->start(args => [ '--busy-reply-threshold', '100' ]);
my $node = RlockTest::node('refusals', $redis,
	conf => ["rlock.watchdog_timeout = '1500ms'"]);
my $worker = RlockTest::worker_pid($node);
my $s = $node->background_psql('postgres');

# SCRIPT FLUSH: the watchdog reloads the scripts and keeps renewing
$s->query_safe("SELECT rlock_session_try('ref:kept')");
$redis->cmd('SCRIPT', 'FLUSH');
# three renewals take longer than the 1.5 s lease: only they keep the key
for my $i (1 .. 3)
{
	ok(RlockTest::wait_for_renewal($redis, 'ref:kept', 5),
		"after SCRIPT FLUSH the lease is still renewed ($i)");
}
is($redis->cmd('EXISTS', 'ref:kept'), 1, 'so the lock outlived its lease');
$s->query_safe("SELECT rlock_session_release('ref:kept')");
is($redis->cmd('EXISTS', 'ref:kept'), 0, 'until released');

# SCRIPT FLUSH before a release of a lock Redis lost: still false
$s->query_safe("SELECT rlock_session_try('ref:lost', '0', '1 hour')");
$redis->cmd('DEL', 'ref:lost');
$redis->cmd('SCRIPT', 'FLUSH');
my ($out) = $s->query("SELECT rlock_session_release('ref:lost')");
is($out, 'f', 'a release resent after SCRIPT FLUSH reports the lost lock');
like($s->{stderr}, qr/was no longer held in Redis/, 'with the warning');
$s->{stderr} = '';

# SCRIPT FLUSH right after a new connection loaded the scripts: the
# reload that follows NOSCRIPT is not refused as "too soon" (only reloads
# count toward the one-a-second bound, not the handshake's own load)
for my $i (1 .. 3)
{
	my $id = $redis->client_id('rlock_command');
	$redis->cmd('CLIENT', 'KILL', 'ID', $id);
	ok( RlockTest::wait_until(
			sub {
				my $new = $redis->client_id('rlock_command');
				defined $new && $new != $id
				  && $node->safe_psql('postgres',
					'SELECT command_connection FROM rlock_status()') eq 'ready';
			},
			10),
		"a new command connection ($i)");
	$redis->cmd('SCRIPT', 'FLUSH');
	my ($rc, $got, $err) =
	  $node->psql('postgres', "SELECT rlock_try('ref:fresh$i')");
	is("$rc $got", '0 t',
		"a lock taken after SCRIPT FLUSH on a fresh connection ($i)")
	  or diag($err);
}

# Redis busy running another client's script: the release at commit is
# refused, and sent again (the check before the commit, which would fail
# it with 58000 while Redis is busy, is off here)
$s->query_safe('SET rlock.verify_at_commit = off');
$s->query_safe('BEGIN');
$s->query_safe("SELECT rlock_try('ref:busy', '0', '1 hour')");
my $hog = $redis->connect;
$hog->send_cmd('EVAL', 'while true do end', 0);
ok( RlockTest::wait_until(
		sub {
			my $r = eval { RlockTest::Resp->connect($redis->port)->call('PING') };
			ref $r eq 'HASH' && $r->{error} =~ /^BUSY/;
		},
		5),
	'another client keeps Redis busy');
$s->query_safe('COMMIT');
ok( RlockTest::wait_until(
		sub {
			slurp_file($node->logfile) =~
			  /Redis refused to release lock "ref:busy"/;
		},
		5),
	'Redis refuses the release, and the refusal is logged');
RlockTest::Resp->connect($redis->port)->call('SCRIPT', 'KILL');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ref:busy') == 0 }, 10),
	'the refused release was sent again once Redis could take it');
$s->query_safe('RESET rlock.verify_at_commit');
is(RlockTest::worker_pid($node), $worker, 'the worker kept running');

# a release the session waits for, refused by Redis (an ACL that no longer
# allows the release script): the session hears Redis's refusal at once,
# 58000 with Redis's text, not a timeout; the release goes on being sent,
# and once Redis takes it the lock is free
my $r = $node->background_psql('postgres', on_error_stop => 0);
$r->query_safe("SELECT rlock_session_try('ref:refused', '0', '1 hour')");
$redis->cmd('ACL', 'SETUSER', 'default', '-evalsha');
my $t0 = time;
$r->query("\\set VERBOSITY verbose\nSELECT rlock_session_release('ref:refused')");
my $took = time - $t0;
like($r->{stderr}, qr/ERROR:  58000: .*\n.*NOPERM/,
	'an early release Redis refuses fails with 58000 and Redis\'s text');
like($r->{stderr}, qr/HINT:  The Redis user rlock connects as \(rlock.username\) lacks a permission/,
	'and a hint');
cmp_ok($took, '<', 1 + 0.5, "within rlock.command_timeout ($took s)");
$r->{stderr} = '';
is($r->query_safe("SELECT rlock_held('ref:refused')"), '0',
	'the hold is gone from the session');
is($redis->cmd('EXISTS', 'ref:refused'), 1, 'while Redis still has the lock');
$redis->cmd('ACL', 'SETUSER', 'default', '+evalsha');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ref:refused') == 0 }, 10),
	'the release was sent again, and Redis took it');
$r->quit;

# a lock without expiry and no unlock message: the waiter looks again
my $foreign = 'abcdef00-1111-4222-8333-444455556666:3';
$redis->cmd('HSET', 'ref:forever', $foreign, 1);
$s->query_until(qr/waiting/,
	"\\echo waiting\nSELECT rlock_session_lock('ref:forever');\n");
ok(RlockTest::wait_for_subscribers($redis, 'ref:forever', 1),
	'a waiter waits for a lock without expiry');
$redis->cmd('DEL', 'ref:forever');
like(scalar $s->query("SELECT 'next'"), qr/next/,
	'the wait ended without any unlock message');
is(scalar @{ $redis->owners('ref:forever') }, 1, 'with the lock taken');
isnt($redis->owners('ref:forever')->[0], $foreign, 'by the waiter');
$s->quit;

# an ACL user that may not SUBSCRIBE: a waiter is still served, and the
# subscriber connection is not made again and again
my $acl = RlockTest::Redis->start(
	args => [ '--user', 'nosub', 'on', '>pw', '~*', '+@all', 'resetchannels' ]);
my $pw = RlockTest::password_file(PostgreSQL::Test::Utils::tempdir, 'pw');
my $n2 = RlockTest::node('nosub', $acl,
	conf => [ "rlock.username = 'nosub'", "rlock.password_file = '$pw'" ]);
$acl->cmd('HSET', 'ref:acl', $foreign, 1);
$acl->cmd('PEXPIRE', 'ref:acl', 2500);
my $before = info_connections($acl);
is($n2->safe_psql('postgres', "SELECT rlock_try('ref:acl', '10 s')"),
	't', 'a waiter whose SUBSCRIBE is refused still gets the lock');
my $made = info_connections($acl) - $before;
cmp_ok($made, '<', 15,
	"while waiting, the worker reconnected with back-off ($made connections)");
my $lines = () = slurp_file($n2->logfile) =~ /subscriber connection/g;
cmp_ok($lines, '<=', 5, "and logged it a few times, not each time ($lines)");

# once the ACL allows SUBSCRIBE, a key whose SUBSCRIBE was refused gets
# its subscription at the next waiter that comes a second or more after
# the refusal (the refusal is not remembered for ever), and the unlock
# message wakes both waiters: the lease is far longer than their wait, so
# nothing else could
$acl->cmd('HSET', 'ref:acl2', $foreign, 1);
$acl->cmd('PEXPIRE', 'ref:acl2', 600_000);
my $w1 = $n2->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($w1, "SELECT rlock_try('ref:acl2', '60 s');");
ok( RlockTest::wait_until(
		sub {
			$n2->safe_psql('postgres', 'SELECT waiting FROM rlock_status()') == 1;
		},
		10),
	'a waiter whose SUBSCRIBE is refused');
my $refused = time;
$acl->cmd('ACL', 'SETUSER', 'nosub', 'allchannels');
RlockTest::wait_until(sub { time > $refused + 1.2 }, 5);
my $w2 = $n2->background_psql('postgres', on_error_stop => 0);
RlockTest::send_query($w2, "SELECT rlock_try('ref:acl2', '60 s');");
ok(RlockTest::wait_for_subscribers($acl, 'ref:acl2', 1, 10),
	'once SUBSCRIBE is allowed, the next waiter subscribes the key');
$acl->cmd('DEL', 'ref:acl2');
$acl->cmd('PUBLISH', 'redisson_lock__channel:{ref:acl2}', '0');
is(join(' ', (RlockTest::collect($w1))[0], (RlockTest::collect($w2))[0]),
	't t', 'and the unlock message wakes the waiters, who take the lock in turn');
$w1->quit;
$w2->quit;
$n2->stop;

# a primary that turned replica (a failover; a DNS name now pointing
# elsewhere): a write is refused with READONLY, which reaches the session
# as 58000, and the worker drops the connection instead of keeping one
# every write of which would be refused; a new connection's handshake
# finds the replica and refuses it, so requests fail with 58030 and the
# reason until the server is a primary again
my $old = RlockTest::Redis->start;
my $new = RlockTest::Redis->start;
my $n3 = RlockTest::node('readonly', $old);
$old->cmd('REPLICAOF', '127.0.0.1', $new->port);
ok( RlockTest::wait_until(
		sub {
			$old->cmd('ROLE')->[0] eq 'slave'
			  && $n3->safe_psql('postgres', "SELECT rlock_is_locked('ref:ro')")
			  eq 'f';
		},
		10),
	'the server is a replica now, and still answers reads');
my ($rc, $ro_out, $err) = $n3->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT rlock_try('ref:ro')");
like($err, qr/ERROR:  58000: .*\n.*READONLY You can't write/,
	'a lock on a replica fails with 58000 and Redis\'s text');
like($err, qr/HINT:  Redis at rlock.host is a read-only replica: point rlock.host at the primary./,
	'and a hint');
ok( RlockTest::wait_until(
		sub {
			$n3->safe_psql('postgres',
				"SELECT command_connection <> 'ready' AND redis_role = 'slave' AND last_error LIKE '%read-only replica%' FROM rlock_status()"
			) eq 't';
		},
		10),
	'the worker dropped the connection, and a new one refuses the replica: rlock_status() says so');
my ($rc2, $out2, $err2, $took2) =
  RlockTest::timed_psql($n3, "SELECT rlock_try('ref:ro2')");
like($err2,
	qr/ERROR:  58030: .*\n.*DETAIL:  No usable connection to Redis at \S+: the server is a read-only replica: point rlock.host at the primary/,
	'a lock then fails with 58030, saying why');
cmp_ok($took2, '<', 1 + 0.5, "within rlock.connect_timeout ($took2 s)");
$old->cmd('REPLICAOF', 'NO', 'ONE');
ok(RlockTest::wait_for_redis($n3, 10), 'once it is a primary again, locks work');
$n3->stop;

sub info_connections
{
	my ($r) = @_;
	my ($n) = $r->cmd('INFO', 'stats') =~ /total_connections_received:(\d+)/;
	return $n;
}

done_testing();
