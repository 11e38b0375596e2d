# Fair locks (rlock_try_fair and its forms): Redisson's fair-lock queue in
# Redis, shared by the sessions of two instances:
#
# - five sessions queue behind a holder: the LIST has their owners in
#   arrival order, the ZSET a deadline each, as Redisson counts them (the
#   first: the holder's lease left plus its wait; each next one: the one
#   before plus its wait); they get the lock in that order, each in turn;
# - rlock_lock_fair, which waits without limit, queues for
#   rlock.fair_wait_timeout (10 s here), as Redisson's lock() for its
#   fairLockWaitTimeout;
# - a waiter whose wait runs out, that is cancelled or whose backend is
#   terminated leaves the queue at once (nobody else calls a fair script
#   meanwhile, so nothing else removes it);
# - an instance that dies leaves its waiter's entry behind, which goes
#   stale at its deadline, and the waiter behind it gets the lock then;
# - the queue and the deadlines stay in step (no LIST entry without a
#   ZSET score).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'the queue does not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @conf = ("rlock.fair_wait_timeout = '10s'", 'log_min_messages = warning');
my $na = RlockTest::node('fair_a', $redis, conf => [@conf]);
my $nb = RlockTest::node('fair_b', $redis, conf => [@conf]);

sub sql { return $na->safe_psql('postgres', $_[0]) }
sub queue { return $redis->cmd('LRANGE', "redisson_lock_queue:{$_[0]}", 0, -1) }
sub deadlines { return { @{ $redis->cmd('ZRANGE', "redisson_lock_timeout:{$_[0]}", 0, -1, 'WITHSCORES') } } }

# Redis's clock in ms
sub redis_ms
{
	my ($s, $us) = @{ $redis->cmd('TIME') };
	return $s * 1000 + int($us / 1000);
}

sub session
{
	my ($node) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{rlock_pid} = $s->query_safe('SELECT pg_backend_pid()');
	return $s;
}

sub owner_of
{
	my ($node, $s, $key) = @_;
	return $node->safe_psql('postgres',
		"SELECT owner FROM rlock_locks WHERE key = '$key' AND pid = $s->{rlock_pid}");
}

# the queue and the deadlines name the same owners
sub in_step
{
	my ($key) = @_;
	my @q = sort @{ queue($key) };
	my @z = sort keys %{ deadlines($key) };
	return "@q" eq "@z";
}

# each instance records who got a lock when, in a table of its own
$_->safe_psql('postgres', 'CREATE TABLE got (key text, who int, at timestamptz)')
  for $na, $nb;

# who got lock $key, in the order they got it, on both instances
sub got_order
{
	my ($key) = @_;
	my @rows = map { [ split /\|/ ] } map {
		split /\n/, $_->safe_psql('postgres',
			"SELECT who, extract(epoch FROM at) FROM got WHERE key = '$key'")
	} $na, $nb;
	return join(' ', map { $_->[0] } sort { $a->[1] <=> $b->[1] } @rows);
}

#---- five waiters, in order ----

{
	my $key = 'fq';
	my $h = session($na);
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key')");
	my (@w, @owners);
	for my $i (1 .. 5)
	{
		# alternate the instances
		my $node = $i % 2 ? $na : $nb;
		my $s = session($node);
		RlockTest::send_query($s,
			"SELECT rlock_session_try_fair('$key', '60 s'); INSERT INTO got VALUES ('$key', $i, clock_timestamp()); SELECT pg_sleep(0.05); SELECT rlock_session_release_fair('$key');");
		ok(RlockTest::wait_until(sub { @{ queue($key) } == $i }, 10),
			"waiter $i is queued");
		push @w, $s;
		push @owners, owner_of($node, $s, $key);
	}
	is_deeply(queue($key), \@owners, 'the queue has their owners in arrival order');
	my $d = deadlines($key);
	is(scalar keys %$d, 5, 'and a deadline each');
	ok(in_step($key), 'the queue and the deadlines in step');
	my @scores = map { $d->{$_} } @owners;
	my @steps = map { $scores[$_] - $scores[ $_ - 1 ] } 1 .. 4;
	is(scalar(grep { $_ > 58000 && $_ <= 60000 } @steps), 4,
		"each deadline is the one before plus the wait, 60 s (@steps)");
	my $first = $scores[0] - redis_ms() - $redis->cmd('PTTL', $key);
	ok($first > 55000 && $first <= 60500,
		"the first one's is the holder's lease left plus its wait ($first)");
	$h->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { scalar(split ' ', got_order($key)) == 5 }, 30),
		'each got the lock');
	is(got_order($key), '1 2 3 4 5', 'in the order they queued');
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 0 }, 10), 'the queue is empty');
	is(scalar keys %{ deadlines($key) }, 0, 'and so are the deadlines');
	$_->quit for @w, $h;
}

#---- rlock_lock_fair queues for rlock.fair_wait_timeout ----

{
	my $key = 'fk';
	my $h = session($na);
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key')");
	my $w = session($nb);
	RlockTest::send_query($w, "BEGIN; SELECT rlock_lock_fair('$key');");
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 1 }, 10), 'rlock_lock_fair queues');
	my $owner = queue($key)->[0];
	my $given = deadlines($key)->{$owner} - redis_ms() - $redis->cmd('PTTL', $key);
	ok($given > 9000 && $given <= 10500,
		"for the lease left plus rlock.fair_wait_timeout ($given ms past the lease)");
	$h->query_safe('COMMIT');
	my ($out) = RlockTest::collect($w);
	is($out, '', 'it gets the lock at the commit');
	$w->query_safe('COMMIT');
	$_->quit for $w, $h;
}

#---- giving up leaves the queue at once ----

{
	my $key = 'fg';
	my $h = session($na);
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key', '0', '60 s')");

	my $w = session($na);
	my $t0 = time;
	RlockTest::send_query($w, "SELECT rlock_try_fair('$key', '1 s');");
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 1 }, 10), 'a waiter with a 1 s wait queues');
	my ($out) = RlockTest::collect($w);
	like($out, qr/^f$/m, 'its wait runs out');
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 0 }, 5),
		'and it leaves the queue');

	for my $how ('pg_cancel_backend', 'pg_terminate_backend')
	{
		my $s = session($nb);
		RlockTest::send_query($s, "SELECT rlock_try_fair('$key', '60 s');");
		ok(RlockTest::wait_until(sub { @{ queue($key) } == 1 }, 10), "$how: a waiter queues");
		$nb->safe_psql('postgres', "SELECT $how($s->{rlock_pid})");
		ok(RlockTest::wait_until(sub { @{ queue($key) } == 0 }, 5),
			"$how: it leaves the queue");
		is(scalar keys %{ deadlines($key) }, 0, "$how: with its deadline");
		eval { $s->quit };
	}
	$h->query_safe('COMMIT');
	$h->quit;
}

#---- an instance that dies ----

{
	# the dead waiter's entry: the holder's 2 s lease plus its 3 s wait
	my $key = 'fd';
	my $h = session($na);
	$h->query_safe("BEGIN; SELECT rlock_try_fair('$key', '0', '2 s')");
	my $dead = session($nb);
	RlockTest::send_query($dead, "SELECT rlock_try_fair('$key', '3 s');");
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 1 }, 10), 'a waiter of instance b queues');
	my $w = session($na);
	RlockTest::send_query($w, "BEGIN; SELECT rlock_try_fair('$key', '60 s');");
	ok(RlockTest::wait_until(sub { @{ queue($key) } == 2 }, 10), 'one of instance a behind it');
	$nb->stop('immediate');
	ok(in_step($key), 'the queue and the deadlines in step');
	my $t0 = time;
	$h->query('COMMIT');    # (its 2 s lease may have run out: 40001)
	my ($out) = RlockTest::collect($w);
	is($out, 't', 'the waiter behind the dead one gets the lock');
	cmp_ok(time - $t0, '<', 10, 'once the dead entry went stale');
	is_deeply(queue($key), [], 'the dead entry is gone');
	$w->query_safe('COMMIT');
	$_->quit for $w, $h;
}

$na->stop;
done_testing();
