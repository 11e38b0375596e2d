# Redis saying no: its script cache flushed (renewals go on, a release
# still reports the truth), busy with another client's script (a refused
# release is sent again), a lock that has no expiry (waiters look again),
# and an ACL user that may not SUBSCRIBE (no reconnection storm, waiters
# are still served).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;

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
is(scalar @{ $redis->cmd('HKEYS', 'ref:forever') }, 1, 'with the lock taken');
isnt($redis->cmd('HKEYS', 'ref:forever')->[0], $foreign, 'by the waiter');
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

sub info_connections
{
	my ($r) = @_;
	my ($n) = $r->cmd('INFO', 'stats') =~ /total_connections_received:(\d+)/;
	return $n;
}

done_testing();
