# rlock's count-down latches against Redisson's RCountDownLatch on the
# same names, for each Redisson version of RlockTest::Redisson, both
# directions:
#
# - a count set on either side is the other's, and neither side sets it
#   twice;
# - Java's await(), with and without a bound (without one it ends only
#   on a "0" on redisson_countdownlatch__channel__{name}), is woken by
#   SQL's last count-down and not by the ones before it;
# - SQL's rlock_latch_wait, with and without a bound, is woken by Java's
#   last countDown(); a bound that runs out answers false in time;
# - the key is gone at zero, as Redisson leaves it; either side deletes
#   the other's latch;
# - a name holding another kind fails with an SQLSTATE and stays as it
#   was.
#
# Skipped until the latch functions exist (issue 28).
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
my $node = RlockTest::node('latches', $redis);

sub sql { return $node->safe_psql('postgres', $_[0]) }


# Redisson's channel: braces added even around a name that has some
sub channel { return "redisson_countdownlatch__channel__{$_[0]}" }
sub subscribed { return $redis->cmd('PUBSUB', 'NUMSUB', channel($_[0]))->[1] }

sub running
{
	my ($s) = @_;
	return RlockTest::count_active($node, $s->{rlock_pid}) == 1;
}

for my $version (@RlockTest::Redisson::VERSIONS)
{
	my $java = RlockTest::Redisson->start($redis, version => $version);
	my $v = "[$version]";
	my $s = RlockTest::session($node);

	#---- Java waits, SQL counts down ----

	my $k = "latch:$version";
	is(sql("SELECT rlock_latch_set('$k', 2)"), 't', "$v SQL sets a count of 2");
	is($redis->cmd('GET', $k), '2', "$v as Redisson's STRING");
	is(sql("SELECT rlock_latch_set('$k', 5)"), 'f', "$v SQL does not set it twice");
	is($java->call('a.1', 'latch.trysetcount', $k, 5), 'false',
		"$v nor does Java's trySetCount");
	is($java->call('a.1', 'latch.count', $k), 2, "$v Java reads 2");
	my $timed = $java->send('x.1', 'latch.await', $k, 30000);
	my $untimed = $java->send('y.1', 'latch.await', $k);
	ok(RlockTest::wait_until(sub { subscribed($k) == 2 }, 10),
		"$v two Java clients await it on the latch's channel");
	is(sql("SELECT rlock_latch_count_down('$k')"), 1, "$v SQL counts down to 1");
	is($java->call('a.1', 'latch.count', $k), 1, "$v Java reads 1");
	ok(!$java->result($timed, 0.5) && !$java->result($untimed, 0.01),
		"$v both go on waiting");
	my $t0 = time;
	is(sql("SELECT rlock_latch_count_down('$k')"), 0, "$v SQL counts down to 0");
	my $r1 = $java->result($timed, 10);
	my $r2 = $java->result($untimed, 10);
	is($r1 && $r1->{value}, 'true', "$v Java's await(30 s) ends true");
	is($r2 && $r2->{value}, 'done', "$v Java's await() without a bound ends");
	cmp_ok($r1->{at} - $t0, '<', 3, "$v at once") if $r1;
	cmp_ok($r2->{at} - $t0, '<', 3, "$v both") if $r2;
	is($redis->cmd('EXISTS', $k), 0, "$v the key is gone, as Redisson leaves it");
	is(sql("SELECT rlock_latch_count('$k')"), 0, "$v SQL reads 0");
	is($java->call('a.1', 'latch.await', $k, 100), 'true', "$v a Java await at 0 ends at once");
	sql("SELECT rlock_latch_count_down('$k')");
	is($redis->cmd('EXISTS', $k), 0, "$v counting down past 0 leaves no key");

	#---- SQL waits, Java counts down ----

	is($java->call('a.1', 'latch.trysetcount', $k, 2), 'true', "$v Java sets a count of 2");
	is(sql("SELECT rlock_latch_count('$k')"), 2, "$v SQL reads 2");
	RlockTest::send_query($s, "SELECT rlock_latch_wait('$k', '30 s');");
	ok(RlockTest::wait_until(sub { running($s) && subscribed($k) >= 1 }, 10),
		"$v SQL waits, rlock subscribed to the latch's channel");
	$java->call('a.1', 'latch.countdown', $k);
	ok(!RlockTest::wait_until(sub { !running($s) }, 0.5), "$v at 1 SQL goes on waiting");
	$t0 = time;
	$java->call('a.1', 'latch.countdown', $k);
	my ($out, $err) = RlockTest::collect($s);
	is($out, 't', "$v Java's last countDown() ends the wait: true") or diag($err);
	cmp_ok(time - $t0, '<', 3, "$v at once");

	# without a bound: only the message can end it
	$java->call('a.1', 'latch.trysetcount', $k, 1);
	RlockTest::send_query($s, "SELECT rlock_latch_wait('$k');");
	ok(RlockTest::wait_until(sub { running($s) && subscribed($k) >= 1 }, 10),
		"$v SQL waits without a bound");
	$t0 = time;
	$java->call('a.1', 'latch.countdown', $k);
	($out, $err) = RlockTest::collect($s);
	is($out, 't', "$v Java's countDown() ends it") or diag($err);
	cmp_ok(time - $t0, '<', 3, "$v at once");

	is($s->query_safe("SELECT rlock_latch_wait('$k', '10 s')"), 't',
		"$v a SQL wait on a latch at 0 ends true");
	$java->call('a.1', 'latch.trysetcount', $k, 1);
	$t0 = time;
	is($s->query_safe("SELECT rlock_latch_wait('$k', '1 s')"), 'f',
		"$v a SQL wait whose bound runs out ends false");
	cmp_ok(time - $t0, '>=', 0.9, "$v not before the bound");
	cmp_ok(time - $t0, '<', 5, "$v nor long after it");

	#---- deleting ----

	is($java->call('a.1', 'latch.delete', $k), 'true', "$v Java deletes the latch");
	is(sql("SELECT rlock_latch_count('$k')"), 0, "$v SQL reads 0");
	is(sql("SELECT rlock_latch_delete('$k')"), 'f', "$v SQL finds nothing to delete");
	is(sql("SELECT rlock_latch_set('$k', 3)"), 't', "$v SQL sets it again");
	is(sql("SELECT rlock_latch_delete('$k')"), 't', "$v and deletes it");
	is($java->call('a.1', 'latch.count', $k), 0, "$v Java reads 0");

	#---- names holding another kind ----

	my $kl = "lock:$version";
	$java->call('e.1', 'lock', $kl);
	my $hash = $redis->cmd('HGETALL', $kl);
	for my $call ("rlock_latch_count_down('$kl')", "rlock_latch_count('$kl')",
		"rlock_latch_wait('$kl', '1 s')")
	{
		$s->query("SELECT $call");
		like($s->{stderr}, qr/ERROR:  [0-9A-Z]{5}: /,
			"$v $call on a Java lock's name fails with an SQLSTATE");
		$s->{stderr} = '';
	}
	$out = $s->query("SELECT rlock_latch_set('$kl', 1)");
	ok($out eq 'f' || $s->{stderr} =~ /ERROR:  [0-9A-Z]{5}: /,
		"$v rlock_latch_set on a Java lock's name sets nothing");
	$s->{stderr} = '';
	is_deeply($redis->cmd('HGETALL', $kl), $hash, "$v the lock is untouched");
	$java->call('e.1', 'unlock', $kl);

	$s->quit;
	$java->stop;
}

$node->stop;
$redis->stop;
done_testing();
