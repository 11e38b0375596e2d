# rlock's shared and exclusive holds against Redisson's read-write lock
# (getReadWriteLock), for each Redisson version of RlockTest::Redisson,
# both directions:
#
# - a Java read lock and rlock_try_shared both enter, and each side's
#   release leaves the other holding (Java's read unlock finds rlock's
#   reader live by its timeout key, and the reverse);
# - a Java write lock keeps a shared rlock waiter out and wakes it at its
#   unlock; a shared rlock hold keeps a Java writer out and wakes it at
#   its commit; a Java thread holding both halves, having let go of the
#   write half, lets rlock's reader in, and an rlock session holding both
#   modes, having let go of the exclusive one, lets Java's reader in;
# - an rlock reader's upgrade waits for a Java reader, is taken at its
#   unlock, and then keeps Java's readers and writers out;
# - what each version's watchdog does to another client's reader: 3.23.5
#   and 3.52.0 renew the timeout keys of every reader of the lock, so
#   that the reader of a PostgreSQL instance that died lives on while a
#   Java reader holds the lock; 4.7.0 only its own; 3.52.0 does not renew
#   its own reader that re-entered, which rlock's last release then
#   counts gone (doc/redisson.md).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::Redisson;
use RlockTest::TLS;

plan skip_all => 'the Redisson cases run in the plain round'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('rw', $redis);

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub readers
{
	my ($key) = @_;
	my %h = @{ $redis->cmd('HGETALL', $key) };
	delete $h{mode};
	return \%h;
}

sub waiting
{
	my ($key) = @_;
	return sql("SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'waiting'");
}

sub rwchan { return "redisson_rwlock:{$_[0]}" }

sub percentile
{
	my ($p, @v) = @_;
	@v = sort { $a <=> $b } @v;
	return @v ? $v[ int($p * $#v + 0.5) ] : -1;
}

for my $version (@RlockTest::Redisson::VERSIONS)
{
	# a 3 s watchdog: Java renews every second
	my $java = RlockTest::Redisson->start($redis, version => $version,
		watchdog => 3000);
	my $v = "[$version]";
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $k = "rw:$version";

	#---- readers share ----

	is($java->call('a.1', 'read.trylock', $k, 0), 'true', "$v a Java read lock");
	is($s->query_safe("BEGIN; SELECT rlock_try_shared('$k')"), 't',
		"$v rlock_try_shared joins it");
	is(scalar keys %{ readers($k) }, 2, "$v two readers in the hash");
	is($java->call('a.1', 'read.held', $k), 'true', "$v Java still holds");
	is($java->call('b.1', 'write.trylock', $k, 0), 'false',
		"$v a Java writer is kept out");
	is(sql("BEGIN; SELECT rlock_try('$k'); COMMIT"), 'f',
		"$v and an rlock writer too");
	# Java's read unlock counts rlock's reader live by its timeout key
	$java->call('a.1', 'read.unlock', $k);
	is_deeply([ keys %{ readers($k) } ],
		[ sql("SELECT owner FROM rlock_locks WHERE key = '$k'") ],
		"$v Java's unlock leaves the lock to rlock's reader");
	is($java->call('b.1', 'write.trylock', $k, 0), 'false',
		"$v a Java writer is still kept out");
	is($java->call('a.1', 'read.trylock', $k, 0), 'true', "$v Java reads again");
	$s->query_safe('COMMIT');
	ok(RlockTest::wait_until(sub { scalar keys %{ readers($k) } == 1 }, 10),
		"$v the commit leaves the lock to the Java reader");
	is($java->call('a.1', 'read.held', $k), 'true', "$v which still holds it");
	$java->call('a.1', 'read.unlock', $k);
	is($redis->cmd('EXISTS', $k), 0, "$v the last unlock frees it");

	#---- an upgrade beside a Java reader ----

	# it waits for the Java reader, whose unlock publishes nothing while
	# rlock's reader remains: the upgrade tries again within a second
	is($java->call('a.1', 'read.trylock', $k, 0), 'true', "$v a Java reader again");
	is($s->query_safe("BEGIN; SELECT rlock_try_shared('$k')"), 't',
		"$v rlock joins the reader again");
	is($s->query_safe("SELECT rlock_try('$k')"), 'f',
		"$v an upgrade without a wait beside a Java reader: busy");
	RlockTest::send_query($s, "SELECT rlock_try('$k', '20 s');");
	ok(RlockTest::wait_until(sub { waiting($k) == 1 }, 10),
		"$v an upgrade waits beside a Java reader");
	$java->call('a.1', 'read.unlock', $k);
	my ($up) = RlockTest::collect($s);
	is($up, 't', "$v and upgrades once the Java reader is gone");
	is($java->call('a.1', 'read.trylock', $k, 0), 'false',
		"$v a Java reader is kept out");
	is($java->call('b.1', 'write.trylock', $k, 0), 'false',
		"$v and a Java writer");
	$s->query_safe('COMMIT');
	is($redis->cmd('EXISTS', $k), 0, "$v the commit frees it");

	#---- a Java writer and an rlock reader wait for each other ----

	# a 60 s lease: a waiter woken by its timer would wait that long
	is($java->call('b.1', 'write.trylock', $k, 0, 60000), 'true',
		"$v a Java write lock");
	is(sql("BEGIN; SELECT rlock_try_shared('$k'); COMMIT"), 'f',
		"$v rlock_try_shared with no wait says busy");
	RlockTest::send_query($s,
		"BEGIN; SELECT rlock_try_shared('$k', '20 s'), extract(epoch FROM clock_timestamp());");
	ok(RlockTest::wait_until(sub { waiting($k) == 1 }, 10), "$v a shared waiter");
	ok(RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', rwchan($k))->[1] >= 1 }, 10),
		"$v listening on the read-write channel");
	my $r = $java->result($java->send('b.1', 'write.unlock', $k), 10);
	my ($out, $err) = RlockTest::collect($s);
	like($out, qr/^t\|\d+/m, "$v the write unlock lets the reader in") or diag($err);
	cmp_ok(($out =~ /^t\|(\d+\.\d+)/m ? $1 : 99) - $r->{start}, '<', 10,
		"$v at the unlock's message, not the 60 s lease's end");

	my $id = $java->send('b.1', 'write.trylock', $k, 20000);
	ok(RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', rwchan($k))->[1] >= 1 }, 10),
		"$v a Java writer waits");
	my $t0 = time;
	$s->query_safe('COMMIT');
	$r = $java->result($id, 25);
	my $got = $r && $r->{ok} && $r->{value} eq 'true';
	ok($got, "$v and gets the lock after the commit")
	  or diag(explain($r));
	cmp_ok($r->{at} - $t0, '<', 2.5,
		"$v woken by the release (the rlock reader's lease was 30 s)") if $r;
	$java->call('b.1', 'write.unlock', $k) if $got;

	#---- wake-up latency of each pair, ten times ----

	my (@to_sql, @to_java);
	for my $i (1 .. 10)
	{
		# a Java write unlock wakes a shared waiter
		$java->call('b.1', 'write.trylock', $k, 0, 60000);
		RlockTest::send_query($s,
			"SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT rlock_session_try_shared('$k', '20 s')) l WHERE l.rlock_session_try_shared;");
		RlockTest::wait_until(sub { waiting($k) == 1 }, 10);
		RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', rwchan($k))->[1] >= 1 }, 10);
		$r = $java->result($java->send('b.1', 'write.unlock', $k), 10);
		($out) = RlockTest::collect($s);
		push @to_sql, ($1 - $r->{start}) * 1000 if $out =~ /^(\d+\.\d+)$/m;

		# a shared release wakes a Java writer
		$id = $java->send('b.1', 'write.trylock', $k, 20000);
		RlockTest::wait_until(
			sub { $redis->cmd('PUBSUB', 'NUMSUB', rwchan($k))->[1] >= 1 }, 10);
		$t0 = time;
		$s->query_safe("SELECT rlock_session_release_shared('$k')");
		$r = $java->result($id, 25);
		push @to_java, ($r->{at} - $t0) * 1000 if $r && $r->{value} eq 'true';
		$java->call('b.1', 'write.unlock', $k);
	}
	is(scalar @to_sql, 10, "$v ten shared waiters woken by a write unlock");
	is(scalar @to_java, 10, "$v ten Java writers woken by a shared release");
	diag(sprintf(
			'%s wake-up, ms: Java write unlock to SQL reader p50 %.1f p99 %.1f; SQL reader release to Java writer p50 %.1f p99 %.1f',
			$v, percentile(0.5, @to_sql), percentile(0.99, @to_sql),
			percentile(0.5, @to_java), percentile(0.99, @to_java)));

	#---- a Redisson RLock on the name waits for rlock's readers ----

	$s->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
	is($java->call('g.1', 'trylock', $k, 0), 'false',
		"$v a Redisson RLock is kept out by a shared hold");
	$id = $java->send('g.1', 'trylock', $k, 20000);
	ok(RlockTest::wait_until(sub { $redis->subscribers($k) >= 1 }, 10),
		"$v and waits on the lock's channel");
	$t0 = time;
	$s->query_safe('COMMIT');
	$r = $java->result($id, 25);
	ok($r && $r->{value} eq 'true' && $r->{at} - $t0 < 10,
		"$v woken by the shared release, not at the 30 s lease");
	$java->call('g.1', 'unlock', $k);

	#---- both halves in one hand, on each side ----

	is($java->call('c.1', 'write.trylock', $k, 0), 'true', "$v Java writes");
	is($java->call('c.1', 'read.trylock', $k, 0), 'true',
		"$v and reads in the same thread");
	is(sql("BEGIN; SELECT rlock_try_shared('$k'); COMMIT"), 'f',
		"$v rlock's reader waits for the writer");
	$java->call('c.1', 'write.unlock', $k);
	is($redis->cmd('HGET', $k, 'mode'), 'read', "$v the write unlock leaves a read lock");
	is(sql("BEGIN; SELECT rlock_try_shared('$k'); COMMIT"), 't',
		"$v which rlock's reader joins");
	$java->call('c.1', 'read.unlock', $k);

	$s->query_safe("BEGIN; SELECT rlock_try('$k'), rlock_try_shared('$k')");
	is($java->call('c.1', 'read.trylock', $k, 0), 'false',
		"$v an rlock session holding both modes keeps Java's reader out");
	$s->query_safe("SELECT rlock_release('$k')");
	is($java->call('c.1', 'read.trylock', $k, 0), 'true',
		"$v having given back the exclusive one, lets it in");
	is($java->call('d.1', 'write.trylock', $k, 0), 'false',
		"$v but no writer");
	$s->query_safe('COMMIT');
	$java->call('c.1', 'read.unlock', $k);
	ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $k) == 0 }, 10),
		"$v all gone");

	#---- a reader of a PostgreSQL instance that died ----

	# what an rlock reader leaves behind when its instance dies: its field
	# and timeout key, which nobody renews
	my $dead = 'dead0000-0000-4000-8000-000000000000:2';
	is($java->call('e.1', 'read.trylock', $k, 0), 'true', "$v a Java reader");
	$redis->cmd('HSET', $k, $dead, '1');
	$redis->cmd('SET', "{$k}:$dead:rwlock_timeout:1", '1', 'PX', 2000);
	my $dkey = "{$k}:$dead:rwlock_timeout:1";
	my ($major) = $version =~ /^(\d+)\./;
	if ($major < 4)
	{
		ok(RlockTest::wait_until(sub { $redis->cmd('PTTL', $dkey) > 2100 }, 5),
			"$v (3.x) Java's watchdog renews the dead reader's key too");
		$java->call('e.1', 'read.unlock', $k);
		is($redis->cmd('EXISTS', $k), 1,
			"$v so that Java's last unlock leaves the lock held by it");
	}
	else
	{
		ok(RlockTest::expires_unrenewed($redis, $dkey, 5),
			"$v Java's watchdog lets the dead reader's key expire");
		$java->call('e.1', 'read.unlock', $k);
		is($redis->cmd('EXISTS', $k), 0,
			"$v and Java's last unlock frees the lock, the dead reader counted gone");
	}
	$redis->cmd('DEL', $k, $dkey);

	# 3.44 to 3.52: a Java reader that re-entered is not renewed, and its
	# keys expire while it holds; rlock's last release then counts it gone
	if ($version =~ /^3\.(4[4-9]|5[0-2])\./)
	{
		$java->call('f.1', 'read.trylock', $k, 0);
		$java->call('f.1', 'read.trylock', $k, 0);
		my $owner = $java->call('f.1', 'owner');
		ok(RlockTest::expires_unrenewed($redis,
				[ map { "{$k}:$owner:rwlock_timeout:$_" } 1, 2 ], 6),
			"$v a Java reader holding twice loses its timeout keys");
		is($java->call('f.1', 'read.held', $k), 'true', "$v and still holds");
		$s->query_safe("BEGIN; SELECT rlock_try_shared('$k')");
		$s->query_safe('COMMIT');
		ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', $k) == 0 }, 10),
			"$v rlock's last release frees the lock under it");
		is($java->call('f.1', 'read.held', $k), 'false',
			"$v the Java reader no longer holds it");
		$redis->cmd('DEL', $k);
	}

	$s->quit;
	$java->stop;
}

done_testing();
