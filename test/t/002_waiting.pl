# Waiting the Redisson way: one subscription per key per instance shared by
# every local waiter and dropped with the last one; retries on each unlock
# message or after the lock's remaining TTL; waits that end or are
# cancelled leave nothing behind.  Sessions of one instance wait in a line,
# but a lock that expires without an unlock message (its holder died) is
# still found free at its lease end by those who joined the line without
# trying, and keys that share a channel ("k" and "{k}") keep separate
# lines.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('waiting', $redis);
my $foreign = '0b7e9c1d-2f3a-4b5c-9d6e-7f8091a2b3c4:1';

# three local waiters behind a foreign holder share one subscription
$redis->cmd('HSET', 'wait:k', $foreign, 1);
$redis->cmd('PEXPIRE', 'wait:k', 60_000);
my @w = map { $node->background_psql('postgres') } 1 .. 3;
my @pids = map { $_->query_safe('SELECT pg_backend_pid()') } @w;
my $pidlist = join(',', @pids);
for my $i (0 .. 2)
{
	$w[$i]->query_until(qr/waiting/,
		"\\echo waiting\nSELECT rlock_session_lock('wait:k');\n");
}

sub waiting_pids
{
	return split /\n/, $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE pid IN ($pidlist) AND wait_event_type = 'Extension' ORDER BY pid"
	);
}
ok(RlockTest::wait_until(sub { scalar(waiting_pids()) == 3 }),
	'three sessions wait');
ok(RlockTest::wait_for_subscribers($redis, 'wait:k', 1),
	'the instance subscribed to the channel');
is($redis->subscribers('wait:k'), 1, 'once, for three waiters');

# the foreign holder unlocks: the waiters get the lock one after another
$redis->cmd('DEL', 'wait:k');
$redis->cmd('PUBLISH', 'redisson_lock__channel:{wait:k}', '0');
my %done;
for my $round (1 .. 3)
{
	my $holder;
	ok( RlockTest::wait_until(
			sub {
				my %waiting = map { $_ => 1 } waiting_pids();
				my @got = grep { !$done{$_} && !$waiting{ $pids[$_] } } 0 .. 2;
				$holder = $got[0] if @got == 1;
				return @got == 1 && scalar(keys %waiting) == 3 - $round;
			},
			20),
		"round $round: one more waiter got the lock");
	last unless defined $holder;
	$done{$holder} = 1;
	is(scalar @{ $redis->owners('wait:k') }, 1, "round $round: exactly one holder");
	$w[$holder]->query_safe("SELECT rlock_session_release('wait:k')");
}
is(scalar(keys %done), 3, 'every waiter got the lock in turn');
ok(RlockTest::wait_for_subscribers($redis, 'wait:k', 0),
	'the subscription was dropped with the last waiter');
is($redis->cmd('EXISTS', 'wait:k'), 0, 'and the lock is free');
$_->quit for @w;

# without any message the waiter retries when the lease runs out
$redis->cmd('HSET', 'wait:ttl', $foreign, 1);
$redis->cmd('PEXPIRE', 'wait:ttl', 1500);
my $t0 = time;
is($node->safe_psql('postgres', "SELECT rlock_try('wait:ttl', '20 s')"),
	't', 'a waiter gets a lock whose holder vanished without unlocking');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<', 10,
	"after the remaining TTL, not after its 20 s wait ($elapsed s)");

# a wait that runs out returns false and leaves nothing
$redis->cmd('HSET', 'wait:out', $foreign, 1);
$redis->cmd('PEXPIRE', 'wait:out', 60_000);
is($node->safe_psql('postgres', "SELECT rlock_try('wait:out', '300 ms')"),
	'f', 'a bounded wait on a held lock returns false');
ok(RlockTest::wait_for_subscribers($redis, 'wait:out', 0),
	'and leaves no subscription');
is_deeply($redis->cmd('HKEYS', 'wait:out'), [$foreign],
	'nor a hold of its own');

# a cancelled waiter leaves nothing either
my $c = $node->background_psql('postgres', on_error_stop => 0);
$c->query_until(qr/waiting/, "\\echo waiting\nSELECT rlock_lock('wait:out');\n");
my $pid;
ok( RlockTest::wait_until(
		sub {
			$pid = $node->safe_psql('postgres',
				"SELECT pid FROM pg_stat_activity WHERE query = 'SELECT rlock_lock(''wait:out'');' AND wait_event_type = 'Extension'"
			);
			$pid ne '';
		}),
	'rlock_lock waits');
ok(RlockTest::wait_for_subscribers($redis, 'wait:out', 1),
	'subscribed while waiting');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
my ($out, $err) = $c->query("SELECT 'after cancel'");
like($c->{stderr}, qr/canceling statement due to user request/,
	'pg_cancel_backend ends the wait');
ok(RlockTest::wait_for_subscribers($redis, 'wait:out', 0),
	'the cancelled wait dropped its subscription');
is_deeply($redis->cmd('HKEYS', 'wait:out'), [$foreign],
	'and took no hold');
is(scalar $c->query("SELECT rlock_held('wait:out')"), '0',
	'the session holds nothing');
$c->quit;

# -- the line ------------------------------------------------------------------

# A foreign holder dies: its lease (1.5 s) runs out and nobody publishes.
# The first waiter gives up early; the second joined the line behind it
# without trying.  It must still try when the lease ends, not wait out its
# own 20 s.
$redis->cmd('HSET', 'line:dead', $foreign, 1);
$redis->cmd('PEXPIRE', 'line:dead', 1500);
my $first = $node->background_psql('postgres');
my $first_pid = $first->query_safe('SELECT pg_backend_pid()');
$first->query_until(qr/started/,
	"\\echo started\nSELECT rlock_try('line:dead', '500 ms');\n");
ok( RlockTest::wait_until(
		sub { RlockTest::count_waiting($node, $first_pid) == 1 }),
	'a first session waits for the dying lock');
my $second = $node->background_psql('postgres');
$t0 = time;
is($second->query_safe("BEGIN; SELECT rlock_try('line:dead', '20 s'); COMMIT"), 't',
	'a session that joined the line gets the lock once the lease ran out');
my $took = time - $t0;
cmp_ok($took, '<', 5, "soon after the lease ended, not at its own deadline ($took s)");
is($first->query_safe('SELECT 1'), "f\n1",
	'the first session had given up (rlock_try false)');
$first->quit;
$second->quit;

# "k" and "{k}" share a channel but are two locks: a waiter for one does
# not make a request for the other wait.
$redis->cmd('HSET', '{line:k}', $foreign, 1);
$redis->cmd('PEXPIRE', '{line:k}', 60_000);
my $braced = $node->background_psql('postgres');
my $braced_pid = $braced->query_safe('SELECT pg_backend_pid()');
$braced->query_until(qr/started/,
	"\\echo started\nBEGIN;\nSELECT rlock_try('{line:k}', '30 s');\nCOMMIT;\n");
ok( RlockTest::wait_until(
		sub { RlockTest::count_waiting($node, $braced_pid) == 1 }),
	'a session waits for "{line:k}"');
$t0 = time;
is($node->safe_psql('postgres', "SELECT rlock_try('line:k', '20 s')"), 't',
	'"line:k" is free and taken');
$took = time - $t0;
cmp_ok($took, '<', 2, "at once ($took s)");
$redis->cmd('DEL', '{line:k}');
$redis->cmd('PUBLISH', 'redisson_lock__channel:{line:k}', '0');
is($braced->query_safe('SELECT 1'), "t\n1", 'the other waiter is served too');
$braced->quit;

done_testing();
