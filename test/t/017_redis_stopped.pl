# Redis stopped while sessions hold locks and others wait: every statement
# that waits for a lock or takes one ends within rlock.connect_timeout +
# rlock.command_timeout with 58030, whatever it waits on (a lock of another
# client or of another local session, with or without a bound, in either
# scope), whether Redis went away cleanly (SIGTERM) or with commands on the
# wire (stalled, then SIGKILL); no backend is left waiting and the worker
# keeps its pid.  Redis here keeps its data (append-only file), so the
# locks held across a short outage are still held afterwards, renewed, and
# released at the end; a release that failed with 58030 is still carried
# out once Redis is back; an acquire that never reached Redis took nothing.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start(
	args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]);
my $node = RlockTest::node('stopped', $redis,
	connect_timeout => '1s',
	command_timeout => '1s',
	conf => ["rlock.watchdog_timeout = '6s'"]);
my $worker = RlockTest::worker_pid($node);
# connect + command timeout, and a modest margin for scheduling
my $budget = 1 + 1 + 1;
my $foreign = '5a5a5a5a-1111-4222-8333-444455556666:7';
$redis->cmd('HSET', 'stop:foreign', $foreign, 1);
$redis->cmd('PEXPIRE', 'stop:foreign', 600_000);

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	return ($s, $s->query_safe('SELECT pg_backend_pid()'));
}

# Start each statement in its own session; returns the sessions and pids.
sub start_all
{
	my (@sql) = @_;
	my (@s, @pids);
	for my $sql (@sql)
	{
		my ($s, $pid) = session();
		RlockTest::send_query($s, $sql);
		push @s, $s;
		push @pids, $pid;
	}
	return (\@s, \@pids);
}

# Check that every session's statement failed with 58030 naming its key.
sub all_58030
{
	my ($sessions, $keys, $what) = @_;
	for my $i (0 .. $#$sessions)
	{
		my ($out, $err) = RlockTest::collect($sessions->[$i]);
		like($err,
			qr/ERROR:  58030: could not reach Redis for lock "\Q$keys->[$i]\E"/,
			"$what: $keys->[$i] fails with 58030");
	}
}

# a holder with a session lock and, in an open transaction, a transaction
# lock
my ($h, $hpid) = session();
$h->query_safe("SELECT rlock_session_try('stop:s')");
$h->query_safe('BEGIN');
$h->query_safe("SELECT rlock_try('stop:x')");
my $owner = $redis->owners('stop:s')->[0];

# -- SIGTERM: Redis closes its connections --------------------------------

my @keys = ('stop:foreign', 'stop:foreign', 'stop:s', 'stop:x');
my ($w, $wpids) = start_all(
	"SELECT rlock_lock('stop:foreign');",
	"SELECT rlock_session_try('stop:foreign', '1 hour');",
	"SELECT rlock_session_lock('stop:s');",
	"SELECT rlock_try('stop:x', '10 min');");
ok( RlockTest::wait_until(
		sub { RlockTest::count_waiting($node, @$wpids) == 4 }),
	'four sessions wait: on a foreign lock, and on locks held here');
ok( RlockTest::wait_for_subscribers($redis, 'stop:foreign', 1)
	  && RlockTest::wait_for_subscribers($redis, 'stop:s', 1)
	  && RlockTest::wait_for_subscribers($redis, 'stop:x', 1),
	'subscribed to the three channels');

$redis->stop;
my $t0 = time;
my ($acq, $apids) = start_all("SELECT rlock_session_try('stop:new');");
ok( RlockTest::wait_until(
		sub { RlockTest::count_active($node, @$wpids, @$apids) == 0 },
		$budget),
	'every waiting or acquiring statement ends');
my $elapsed = time - $t0;
cmp_ok($elapsed, '<', $budget,
	"within connect_timeout + command_timeout ($elapsed s)");
all_58030($w, \@keys, 'Redis stopped while waiting');
all_58030($acq, ['stop:new'], 'Redis stopped before acquiring');
is(RlockTest::worker_pid($node), $worker, 'the worker keeps running');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND wait_event_type = 'Extension'"),
	'0', 'no backend waits for the worker any more');

# Redis back with its data: what was held is still held
$redis->restart;
ok(RlockTest::wait_for_redis($node, 5), 'service resumes once Redis is back');
is_deeply($redis->owners('stop:s'), [$owner],
	'the session lock held across the outage is still held');
ok(RlockTest::wait_for_renewal($redis, 'stop:s', 5), 'and renewed again');
is(scalar $w->[2]->query("SELECT rlock_held('stop:s')"), '0',
	'the session that waited for it holds nothing');
$h->query('COMMIT');
is($h->{stderr}, '', 'the transaction holding a lock across the outage commits');
is($redis->cmd('EXISTS', 'stop:x'), 0, 'and so releases it');
$_->quit for @$w, @$acq;

# -- stalled, then SIGKILL: commands on the wire are never answered --------

my ($r, $rpid) = session();
$r->query_safe("SELECT rlock_session_try('stop:rel')");
@keys = ('stop:foreign', 'stop:frozen', 'stop:rel');
my $waiter;
($waiter, $wpids) = start_all("SELECT rlock_lock('stop:foreign');");
ok(RlockTest::wait_for_subscribers($redis, 'stop:foreign', 1),
	'a session waits again on the foreign lock');
$redis->freeze;
($acq, $apids) = start_all("SELECT rlock_session_try('stop:frozen');");
RlockTest::send_query($r, "SELECT rlock_session_release('stop:rel');");
ok( RlockTest::wait_until(
		sub { RlockTest::count_waiting($node, @$apids, $rpid) == 2 }, 2),
	'an acquire and a release wait for a stalled Redis');
$redis->kill9;
$t0 = time;
ok( RlockTest::wait_until(
		sub {
			RlockTest::count_active($node, @$wpids, @$apids, $rpid) == 0;
		},
		$budget),
	'every statement ends after Redis is killed');
$elapsed = time - $t0;
cmp_ok($elapsed, '<', $budget,
	"within connect_timeout + command_timeout ($elapsed s)");
all_58030([ @$waiter, @$acq, $r ], \@keys, 'Redis killed while stalled');
is(RlockTest::worker_pid($node), $worker, 'the worker keeps running');

$redis->restart;
ok(RlockTest::wait_for_redis($node, 5), 'service resumes once Redis is back');
is($redis->cmd('EXISTS', 'stop:frozen'), 0,
	'the acquire that never reached Redis took nothing');
is(scalar $acq->[0]->query("SELECT rlock_held('stop:frozen')"), '0',
	'and its session holds nothing');
is(scalar $r->query("SELECT rlock_held('stop:rel')"), '0',
	'the session whose release failed no longer counts the lock');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'stop:rel') == 0 }, 5),
	'and the release is carried out once Redis is back');
is(scalar $h->query("SELECT rlock_session_release('stop:s')"), 't',
	'the lock held through both outages is released');
is_deeply($redis->cmd('KEYS', 'stop:*'), ['stop:foreign'],
	'nothing is left but the foreign lock');
is(RlockTest::worker_pid($node), $worker, 'the same worker ran throughout');
$_->quit for @$waiter, @$acq, $r, $h;

done_testing();
