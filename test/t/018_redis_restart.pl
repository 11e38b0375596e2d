# Redis restarted with its data lost: it comes back from an older snapshot
# that has another client's lock and none of rlock's.  The worker
# reconnects within one second of Redis being back and subscribes again to
# the channel its waiters need; they went on waiting through the outage
# and get the lock as soon as the other client lets go.  New requests
# work.  Every hold whose key vanished is reported lost: a transaction
# that held one fails to commit with 40001, a session-scoped hold gives a
# WARNING and rlock_held 0; renewals do not bring the keys back.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use RlockTest;

my $redis = RlockTest::Redis->start;
# connect_timeout longer than the outage, so that waiters see it through
my $node = RlockTest::node('restart', $redis,
	connect_timeout => '5s',
	command_timeout => '1s',
	conf => ["rlock.watchdog_timeout = '3s'"]);
my $worker = RlockTest::worker_pid($node);
my $other = 'other:1';

# the snapshot Redis will come back from: another client's lock only
$redis->cmd('HSET', 'rs:busy', $other, 1);
$redis->cmd('PEXPIRE', 'rs:busy', 60_000);
is($redis->cmd('SAVE'), 'OK', 'a snapshot with a foreign lock');

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	return ($s, $s->query_safe('SELECT pg_backend_pid()'));
}

# holds taken after the snapshot
my ($h, $hpid) = session();
$h->query_safe("SELECT rlock_session_try('rs:s'), rlock_session_try('rs:s')");
$h->query_safe('BEGIN');
$h->query_safe("SELECT rlock_try('rs:x')");
is_deeply($redis->counts('rs:s'), ['2'], 'a session lock held twice');

# two sessions wait for the foreign lock
my ($w1, $pid1) = session();
my ($w2, $pid2) = session();
RlockTest::send_query($w1, "SELECT rlock_session_lock('rs:busy');");
RlockTest::send_query($w2, "SELECT rlock_session_try('rs:busy', '1 min');");
ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $pid1, $pid2) == 2 }),
	'two sessions wait for the foreign lock');
ok(RlockTest::wait_for_subscribers($redis, 'rs:busy', 1), 'on one subscription');

# down long enough for the reconnection back-off to reach its cap
$redis->stop;
sleep(2);
$redis->restart;
my $back = time;
ok( RlockTest::wait_until(
		sub {
			defined $redis->client_id('rlock_command')
			  && defined $redis->client_id('rlock_subscriber');
		},
		5),
	'the worker reconnects both connections');
my $elapsed = time - $back;
cmp_ok($elapsed, '<', 1.5,
	"within one second of Redis being back ($elapsed s)");
ok(RlockTest::wait_for_subscribers($redis, 'rs:busy', 1, 2),
	'and subscribes again to the channel its waiters need');
is(RlockTest::count_waiting($node, $pid1, $pid2), 2,
	'the waiters still wait: the foreign lock is in the snapshot');
is_deeply($redis->cmd('KEYS', 'rs:*'), ['rs:busy'],
	"rlock's own locks are gone from Redis");
is($node->safe_psql('postgres', "SELECT rlock_try('rs:new')"), 't',
	'new requests work');

# the other client lets go: a waiter gets the lock at once, the other
# one after it, long before the 60 s lease would have run out
$redis->cmd('DEL', 'rs:busy');
my $t0 = time;
is($redis->cmd('PUBLISH', 'redisson_lock__channel:{rs:busy}', '0'), 1,
	'the unlock message reaches the worker');
ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, $pid1, $pid2) == 1 }, 5),
	'a waiter gets the released lock');
$elapsed = time - $t0;
cmp_ok($elapsed, '<', 2, "right after the release ($elapsed s)");
my ($first, $second) =
  RlockTest::count_waiting($node, $pid1) ? ($w2, $w1) : ($w1, $w2);
RlockTest::collect($first);
is(scalar $first->query("SELECT rlock_session_release('rs:busy')"), 't',
	'it releases the lock');
my ($out, $err) = RlockTest::collect($second);
is($err, '', 'and the other waiter gets it');
is(scalar $second->query("SELECT rlock_session_release('rs:busy')"), 't',
	'and releases it too');

# the holds that vanished are reported lost
ok( RlockTest::wait_until(
		sub { $h->query("SELECT rlock_held('rs:s')") eq '0' }, 5),
	'the lost session lock is no longer counted');
like($h->{stderr}, qr/WARNING:  01000: session-scoped lock "rs:s" was lost/,
	'and reported with a warning');
$h->{stderr} = '';
$h->query('COMMIT');
like($h->{stderr},
	qr/ERROR:  40001: lock "rs:x" was lost before the transaction committed/,
	'the transaction that held a vanished lock fails to commit');
$h->{stderr} = '';
ok(!RlockTest::wait_for_renewal($redis, 'rs:s', 1.5)
	  && $redis->cmd('EXISTS', 'rs:s') == 0,
	'renewals do not bring a vanished lock back');

# the session takes the lock afresh, once, and nothing is left
is(scalar $h->query("SELECT rlock_session_try('rs:s')"), 't',
	'the session takes the lost lock again');
is_deeply($redis->counts('rs:s'), ['1'], 'with a count of one in Redis');
is(scalar $h->query("SELECT rlock_session_release('rs:s')"), 't',
	'one release');
ok(RlockTest::wait_until(sub { @{ $redis->cmd('KEYS', 'rs:*') } == 0 }, 5),
	'leaves nothing in Redis');
is(RlockTest::worker_pid($node), $worker, 'the same worker ran throughout');
$_->quit for $h, $w1, $w2;

done_testing();
