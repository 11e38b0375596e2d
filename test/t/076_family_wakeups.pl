# Wake-ups across the kinds of Redisson's lock family, with the data and
# messages of Redisson's read-write and fair locks written by hand (the
# real Redisson plays them in 034): what rlock's waiters listen to when a
# read-write lock keeps them waiting, and what rlock's releases tell the
# waiters of the other kinds.
#
# - a write lock (a ":write" owner) or a read lock keeps rlock_try
#   waiting, not failing; the waiter listens on redisson_rwlock:{name}
#   as well as on the lock's channel, and leaves it when it stops
#   waiting; "1" there (a write unlock) retries every waiter, "0" (the
#   last reader's unlock) one of them, long before the lease they saw;
# - rlock's release, and rlock_force_release, publish "1" on the
#   read-write channel and "0" on the channel of the first owner queued
#   for a fair lock of the name whose deadline has not passed, braces or
#   not; the release of the last shared hold publishes "0" there, as
#   Redisson's read unlock;
# - rlock_force_release removes a read-write lock.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Resp;
use RlockTest::TLS;

plan skip_all => 'the messages do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('family', $redis);

sub sql { return $node->safe_psql('postgres', $_[0]) }

# Redisson's derived names: prefix:{name}, or prefix:name with a brace
sub derived
{
	my ($prefix, $key) = @_;
	return $key =~ /\{/ ? "$prefix:$key" : "$prefix:{$key}";
}

sub numsub { return $redis->cmd('PUBSUB', 'NUMSUB', $_[0])->[1] }

sub waiting
{
	my ($key) = @_;
	return sql("SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'waiting'");
}

# A session that waits up to 30 s for $key, then says when it got it
sub start_waiter
{
	my ($key, $scope) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{rlock_pid} = $s->query_safe('SELECT pg_backend_pid()');
	my $f = $scope eq 'session' ? 'rlock_session_try' : 'rlock_try';
	RlockTest::send_query($s,
		($scope eq 'session' ? '' : 'BEGIN; ')
		  . "SELECT $f('$key', '30 s'), extract(epoch FROM clock_timestamp());");
	return $s;
}

sub outcome
{
	my ($s) = @_;
	my ($out, $err) = RlockTest::collect($s);
	return $out =~ /^(t|f)\|(\d+\.\d+)$/m ? ($1, $2) : ('', $err);
}

# Of the waiters @s, the one that holds $key now
sub holder_of
{
	my ($key, @s) = @_;
	my $pid = sql("SELECT pid FROM rlock_locks WHERE key = '$key' AND state = 'held'");
	my ($s) = grep { $_->{rlock_pid} eq $pid } @s;
	die "nobody of the waiters holds $key" unless $s;
	return $s;
}

#---- a write lock keeps rlock waiting; its unlock message lets it in ----

for my $key ('rw:w', 'rw{w}')
{
	my $rwchan = derived('redisson_rwlock', $key);
	$redis->cmd('HSET', $key, 'mode', 'write', 'java-uuid:7:write', '1');
	$redis->cmd('PEXPIRE', $key, 60000);
	is(sql("BEGIN; SELECT rlock_try('$key'); COMMIT"), 'f',
		"$key: a write lock makes rlock_try with no wait say busy, not fail");
	my $s = start_waiter($key, 'session');
	ok(RlockTest::wait_until(sub { waiting($key) == 1 }, 10),
		"$key: rlock_session_try waits for the write lock");
	ok(RlockTest::wait_until(sub { numsub($rwchan) == 1 }, 10),
		"$key: the waiter listens on $rwchan");
	is($redis->subscribers($key), 1, "$key: and on the lock's channel");
	my $t0 = time;
	$redis->cmd('DEL', $key);
	$redis->cmd('PUBLISH', $rwchan, '1');
	my ($got, $at) = outcome($s);
	is($got, 't', "$key: the write unlock's message lets it in");
	cmp_ok($at - $t0, '<', 10, "$key: at the message, not at the 60 s lease")
	  if $got eq 't';
	ok(RlockTest::wait_until(sub { numsub($rwchan) == 0 }, 10),
		"$key: no longer waiting, it leaves the read-write channel");
	$s->query_safe("SELECT rlock_session_release('$key')");
	$s->quit;
}

#---- a read lock; "0" retries one waiter, "1" all of them ----

{
	my $key = 'rw:r';
	my $rwchan = derived('redisson_rwlock', $key);
	$redis->cmd('HSET', $key, 'mode', 'read', 'java-uuid:8', '1');
	$redis->cmd('SET', "{$key}:java-uuid:8:rwlock_timeout:1", '1', 'PX', 60000);
	$redis->cmd('PEXPIRE', $key, 60000);
	my @s = map { start_waiter($key, 'xact') } 1 .. 2;
	ok(RlockTest::wait_until(sub { waiting($key) == 2 }, 10),
		'two transactions wait for the read lock');
	ok(RlockTest::wait_until(sub { numsub($rwchan) == 1 }, 10),
		'one subscription of the instance on the read-write channel');
	my $mon = $redis->monitor;
	$redis->cmd('DEL', $key);
	$redis->cmd('PUBLISH', $rwchan, '0');
	ok(RlockTest::wait_until(sub { waiting($key) == 1 }, 10),
		'the last reader\'s "0" lets one of them in');
	my $tries = grep { ref $_ eq '' && /"evalsha"/i && /"\Q$key\E"/ }
	  $mon->drain(0.3);
	is($tries, 1, 'with one try: "0" retries one waiter');
	# the one that took it commits: its release hands the lock on
	my @got = (outcome(holder_of($key, @s)));
	is($got[0], 't', 'the one let in got it');
	holder_of($key, @s)->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { waiting($key) == 0 }, 10),
		'its commit hands the lock to the other');
	@got = (outcome(holder_of($key, @s)));
	is($got[0], 't', 'which got it');
	holder_of($key, @s)->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { numsub($rwchan) == 0 }, 10),
		'and the read-write channel is left');
	$_->quit for @s;

	# "1" retries every waiter.  Waiters of one key form a line, whose
	# members behind the first do not try until it is done (002): the
	# keys "rw:r" and "{rw:r}" share the read-write channel, so their
	# first waiters both listen there.
	my @keys = ($key, "{$key}");
	for my $k (@keys)
	{
		$redis->cmd('HSET', $k, 'mode', 'write', 'java-uuid:9:write', '1');
		$redis->cmd('PEXPIRE', $k, 60000);
	}
	@s = map { start_waiter($_, 'xact') } @keys;
	ok(RlockTest::wait_until(
			sub { waiting($keys[0]) == 1 && waiting($keys[1]) == 1 }, 10),
		'a transaction waits for each of two write locks');
	ok(RlockTest::wait_until(sub { numsub($rwchan) == 1 }, 10),
		'one subscription on their read-write channel');
	$mon = $redis->monitor;
	$redis->cmd('PUBLISH', $rwchan, '1');
	my %tried;
	my $deadline = time + 10;
	while (keys %tried < 2 && time < $deadline)
	{
		for my $line ($mon->drain(0.2))
		{
			next unless ref $line eq '' && $line =~ /"evalsha"/i;
			$tried{$_}++ for grep { $line =~ /"\Q$_\E"/ } @keys;
		}
	}
	is_deeply(\%tried, { map { $_ => 1 } @keys },
		'"1" retries both waiters, once each (the locks are still held)');
	is(waiting($keys[0]) + waiting($keys[1]), 2, 'and both wait on');
	$redis->cmd('DEL', @keys);
	$redis->cmd('PUBLISH', $rwchan, '1');
	ok(RlockTest::wait_until(
			sub { waiting($keys[0]) + waiting($keys[1]) == 0 }, 10),
		'both freed: both take their lock at the message');
	for my $i (0, 1)
	{
		is((outcome($s[$i]))[0], 't', "$keys[$i]: taken");
		$s[$i]->query_safe('COMMIT');
		$s[$i]->quit;
	}
}

#---- rlock's release tells the read-write and fair waiters ----

# The messages $sub hears until two channels have spoken (5 s at most
# between two): channel => [messages]
sub two_channels
{
	my ($sub) = @_;
	my %got;
	while (my $m = $sub->next_message(5))
	{
		push @{ $got{ $m->[0] } }, $m->[1];
		last if keys %got == 2;
	}
	return %got;
}

for my $key ('fam', 'fam{x}')
{
	my $rwchan = derived('redisson_rwlock', $key);
	my $queue = derived('redisson_lock_queue', $key);
	my $head = derived('redisson_lock__channel', $key) . ':java-uuid:3';
	my $second = derived('redisson_lock__channel', $key) . ':java-uuid:4';
	my $deadlines = derived('redisson_lock_timeout', $key);
	my $now = do { my ($s, $us) = @{ $redis->cmd('TIME') }; $s * 1000 + int($us / 1000) };
	$redis->cmd('RPUSH', $queue, 'java-uuid:3', 'java-uuid:4');
	$redis->cmd('ZADD', $deadlines, $now + 600000, 'java-uuid:3', $now + 700000, 'java-uuid:4');
	my $sub = $redis->connect;
	$sub->send_cmd('SUBSCRIBE', $rwchan, $head, $second);
	$sub->read_reply(5) for 1 .. 3;
	sql("BEGIN; SELECT rlock_try('$key'); COMMIT");
	my %got = two_channels($sub);
	is_deeply(\%got, { $rwchan => ['1'], $head => ['0'] },
		"$key: a release publishes \"1\" on $rwchan and \"0\" to the fair queue's head only");
	is($redis->cmd('LLEN', $queue), 2, "$key: the queue is left as it was");

	# the last shared hold's release: "0", as Redisson's read unlock, which
	# a writer that failed its try but is not yet asleep keeps ("1" would
	# wake only those asleep); rlock's own channel "0" as ever
	my $own = derived('redisson_lock__channel', $key);
	$sub->send_cmd('SUBSCRIBE', $own);
	$sub->read_reply(5);
	sql("BEGIN; SELECT rlock_try_shared('$key'); SELECT rlock_try_shared('$key'); COMMIT");
	my %shared;
	while (my $m = $sub->next_message(5))
	{
		push @{ $shared{ $m->[0] } }, $m->[1];
		last if keys %shared == 3;
	}
	is_deeply(\%shared, { $rwchan => ['0'], $own => ['0'], $head => ['0'] },
		"$key: the last shared release publishes \"0\" on $rwchan, the lock's channel and to the fair queue's head");
	$sub->send_cmd('UNSUBSCRIBE', $own);
	$sub->read_reply(5);

	# rlock_force_release of a read-write lock
	$redis->cmd('HSET', $key, 'mode', 'read', 'java-uuid:5', '2');
	is(sql("SELECT rlock_force_release('$key')"), 't',
		"$key: rlock_force_release removes a read lock");
	is($redis->cmd('EXISTS', $key), 0, "$key: the key is gone");
	%got = two_channels($sub);
	is_deeply(\%got, { $rwchan => ['1'], $head => ['0'] },
		"$key: and tells both families' waiters");

	# a head whose deadline passed is gone: its successor is told
	$redis->cmd('ZADD', $deadlines, $now - 1000, 'java-uuid:3');
	sql("BEGIN; SELECT rlock_try('$key'); COMMIT");
	%got = two_channels($sub);
	is_deeply(\%got, { $rwchan => ['1'], $second => ['0'] },
		"$key: with the head's deadline passed, the next owner is told");
	is($redis->cmd('LLEN', $queue), 2, "$key: and the queue is left as it was");
	$redis->cmd('DEL', $queue, $deadlines);
}

done_testing();
