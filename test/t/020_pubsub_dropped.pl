# The subscriber connection dropped alone (CLIENT KILL TYPE pubsub), the
# command connection staying up: waiters are not stranded.  The worker
# subscribes again (PUBSUB NUMSUB back to 1), also after several drops in
# a row, and the waiters get the lock as soon as another client releases
# it, long before that client's 60 s lease would have run out: when the
# unlock message comes after the subscription is back, and when the
# release happens while the subscriber connection is down (its message
# reaching nobody).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('pubsub', $redis);
my $worker = RlockTest::worker_pid($node);
my $lease = 60_000;

# Another client holds $key, the Redisson way.
sub hold_elsewhere
{
	my ($key) = @_;
	$redis->cmd('HSET', $key, 'other:1', 1);
	$redis->cmd('PEXPIRE', $key, $lease);
}

# The other client lets go: the key goes and "0" is published.  Returns
# how many subscribers the message reached.
sub release_elsewhere
{
	my ($key) = @_;
	$redis->cmd('DEL', $key);
	return $redis->cmd('PUBLISH', "redisson_lock__channel:{$key}", '0');
}

sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	return ($s, $s->query_safe('SELECT pg_backend_pid()'));
}

# -- dropped while waiting, released after the subscription is back ------

hold_elsewhere('ps:k');
my (@w, @pids);
for my $sql ("SELECT rlock_session_lock('ps:k');",
	"SELECT rlock_session_lock('ps:k');",
	"SELECT rlock_session_try('ps:k', '50 s');")
{
	my ($s, $pid) = session();
	RlockTest::send_query($s, $sql);
	push @w, $s;
	push @pids, $pid;
}
ok(RlockTest::wait_until(sub { RlockTest::count_waiting($node, @pids) == 3 }),
	'three sessions wait for a lock held elsewhere');
ok(RlockTest::wait_for_subscribers($redis, 'ps:k', 1), 'on one subscription');
my $command_id = $redis->client_id('rlock_command');

for my $drop (1 .. 3)
{
	my $sub_id = $redis->client_id('rlock_subscriber');
	cmp_ok($redis->cmd('CLIENT', 'KILL', 'TYPE', 'pubsub'), '>=', 1,
		"drop $drop: the subscriber connection is killed");
	ok( RlockTest::wait_until(
			sub {
				my $id = $redis->client_id('rlock_subscriber');
				defined $id && $id != $sub_id;
			},
			5),
		"drop $drop: the worker connects again");
	ok(RlockTest::wait_for_subscribers($redis, 'ps:k', 1, 5),
		"drop $drop: and subscribes again (NUMSUB back to 1)");
}
is($redis->client_id('rlock_command'), $command_id,
	'the command connection was left alone');
is(RlockTest::count_waiting($node, @pids), 3, 'the three sessions still wait');

my $t0 = time;
is(release_elsewhere('ps:k'), 1, 'the other client releases the lock');
my %got;
for my $turn (1 .. 3)
{
	my $holder;
	ok( RlockTest::wait_until(
			sub {
				my @now = grep { !$got{$_} && !RlockTest::count_waiting($node, $pids[$_]) } 0 .. 2;
				$holder = $now[0] if @now == 1;
				return @now == 1;
			},
			5),
		"turn $turn: one more waiter gets the lock");
	my $elapsed = time - $t0;
	cmp_ok($elapsed, '<', 3,
		"turn $turn: $elapsed s after the release, not after the 60 s lease");
	last unless defined $holder;
	$got{$holder} = 1;
	my ($out, $err) = RlockTest::collect($w[$holder]);
	is($err, '', "turn $turn: without an error");
	is(scalar $w[$holder]->query("SELECT rlock_session_release('ps:k')"),
		't', "turn $turn: it releases the lock to the next");
}
ok(RlockTest::wait_for_subscribers($redis, 'ps:k', 0),
	'the subscription went with the last waiter');
is($redis->cmd('EXISTS', 'ps:k'), 0, 'and nothing is left');

# -- released while the subscriber connection is down ---------------------

# The release must come after the kill and before the worker subscribes
# again, which the message reaching nobody shows; the worker reconnects
# within milliseconds, so try a few times if it was quicker than us.
my ($unheard, $elapsed);
my ($s, $pid) = ($w[0], $pids[0]);
for my $try (1 .. 10)
{
	hold_elsewhere('ps:down');
	RlockTest::send_query($s, "SELECT rlock_session_lock('ps:down');");
	RlockTest::wait_for_subscribers($redis, 'ps:down', 1)
	  or die 'the waiter did not subscribe';
	$redis->cmd('CLIENT', 'KILL', 'TYPE', 'pubsub');
	my $t0 = time;
	$unheard = release_elsewhere('ps:down') == 0;
	RlockTest::wait_until(sub { RlockTest::count_waiting($node, $pid) == 0 }, 10);
	$elapsed = time - $t0;
	RlockTest::collect($s);
	$s->query("SELECT rlock_session_release('ps:down')");
	last if $unheard;
}
ok($unheard, 'a release happened while the subscriber connection was down');
cmp_ok($elapsed, '<', 3,
	"the waiter got the lock $elapsed s after it, not after the 60 s lease");
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'ps:down') == 0 }),
	'and released it');
is($redis->client_id('rlock_command'), $command_id,
	'the command connection was left alone throughout');
is(RlockTest::worker_pid($node), $worker, 'and so was the worker');
$_->quit for @w;

done_testing();
