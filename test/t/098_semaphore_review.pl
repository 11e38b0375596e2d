# Review of semaphores and latches against hostile data in Redis, each
# case a bug found and fixed:
#
# - a semaphore's name holding a string that is not a number: the
#   available count answered nil, a reply rlock does not accept, and the
#   worker dropped its connection (every command on it failed with
#   58030); now the call fails alone with 58000;
# - counts Lua cannot hold exactly (2^53 and beyond): rlock_add_permits
#   wrote the count back as a rounded float ("9.2233720368547758e+18",
#   which Redisson's INCRBY and DECRBY then refuse), and both semaphore
#   and latch counts came back rounded or as -2^63; now such a count
#   fails with 58000 and is left as it was, an addition is Redis's own
#   INCRBY, and rlock_latch_set refuses a count beyond 2^53 - 1 (22023);
# - a release that Redis refused (the count not a number) had removed
#   the owner's permits first, and the giving back of expired permits
#   too: those permits were gone; now such a call changes nothing;
# - a permit scored below zero (never given back, as in Redisson) made a
#   waiter try again every few milliseconds until its wait ended.
#
# And one check that found nothing: an owner's permits given back in part
# after their lease ended (at most 1024 go back a call) leave the
# semaphore's permits adding up when the owner takes more.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'semaphores do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('sem_review', $redis,
	conf => ["rlock.watchdog_timeout = '1500ms'"]);

sub sql { return $node->safe_psql('postgres', $_[0]) }

# ($rc, $out, $err) of $sql, errors verbose
sub try_sql { return (RlockTest::timed_psql($node, $_[0]))[ 0 .. 2 ] }

sub sqlstate { my ($rc, $out, $err) = try_sql($_[0]); return $err =~ /ERROR:\s+([0-9A-Z]{5})/ ? $1 : "rc $rc: $out" }

sub reconnects { return sql('SELECT reconnects FROM rlock_stats') }

sub evalsha_calls
{
	my ($calls) = $redis->cmd('INFO', 'commandstats') =~ /cmdstat_evalsha:calls=(\d+)/;
	return $calls // 0;
}

sub redis_ms
{
	my ($s, $us) = @{ $redis->cmd('TIME') };
	return $s * 1000 + int($us / 1000);
}

#---- a count that is not a number fails the call, not the connection ----
{
	$redis->cmd('SET', 'rev:abc', 'abc');
	my $before = reconnects();
	is(sqlstate("SELECT rlock_available_permits('rev:abc')"), '58000',
		'the available count of a name holding "abc" fails with 58000');
	is(sqlstate("SELECT rlock_add_permits('rev:abc', 1)"), '58000',
		'adding to it too');
	is(reconnects(), $before, 'and the worker kept its connection');
	is($redis->cmd('GET', 'rev:abc'), 'abc', 'the value is left alone');
}

#---- counts beyond what Lua holds exactly ----
{
	$redis->cmd('SET', 'rev:big', '9223372036854775807');
	is(sqlstate("SELECT rlock_available_permits('rev:big')"), '58000',
		'a count of 2^63 - 1 is not read as a wrong number');
	is(sqlstate("SELECT rlock_add_permits('rev:big', 1)"), '58000',
		'nor added to');
	is($redis->cmd('GET', 'rev:big'), '9223372036854775807',
		'and stays as it was, an integer');

	$redis->cmd('SET', 'rev:near', '9007199254740993');
	is(sqlstate("SELECT rlock_add_permits('rev:near', 0)"), '58000',
		'2^53 + 1 is refused too');
	is($redis->cmd('GET', 'rev:near'), '9007199254740993', 'unchanged');

	$redis->cmd('SET', 'rev:fine', '999999999999999');
	is(sql("SELECT rlock_add_permits('rev:fine', 2147483647)"), '1000002147483646',
		'a large count Lua holds exactly is added to');
	is($redis->cmd('GET', 'rev:fine'), '1000002147483646', 'and written as an integer');
	is(sql("SELECT rlock_available_permits('rev:fine')"), '1000002147483646',
		'and read back exactly');

	is(sqlstate("SELECT rlock_latch_set('rev:latch', 9223372036854775807)"), '22023',
		'a latch count beyond 2^53 - 1 is refused');
	is(sql("SELECT rlock_latch_set('rev:latch', 9007199254740991)"), 't',
		'2^53 - 1 is taken');
	is(sql("SELECT rlock_latch_count_down('rev:latch')"), '9007199254740990',
		'and counted down exactly');
	$redis->cmd('SET', 'rev:javalatch', '9223372036854775807');
	is(sqlstate("SELECT rlock_latch_count('rev:javalatch')"), '58000',
		'a latch of 2^63 - 1 set elsewhere is not read as a wrong number');
	is(sqlstate("SELECT rlock_latch_count_down('rev:javalatch')"), '58000',
		'nor counted down');
	is($redis->cmd('GET', 'rev:javalatch'), '9223372036854775807', 'it is left as it was');
}

#---- a refused release changes nothing ----
{
	sql("SELECT rlock_set_permits('rev:rel', 3)");
	my $s = RlockTest::session($node);
	$s->query_safe("SELECT rlock_session_try_permits('rev:rel', 2)");
	$redis->cmd('SET', 'rev:rel', 'abc');
	$s->query("SELECT rlock_session_release_permits('rev:rel', 2)");
	like($s->{stderr}, qr/58000/, 'a release Redis refuses fails with 58000');
	$s->{stderr} = '';
	is($redis->cmd('ZCARD', '{rev:rel}:timeout'), 2,
		'and the permits are still there, not removed without being counted back');
	$redis->cmd('SET', 'rev:rel', '1');
	$s->quit;
	ok(RlockTest::wait_until(sub { $redis->cmd('ZCARD', '{rev:rel}:timeout') == 0 }, 10),
		'the session\'s end gives them back');
	is($redis->cmd('GET', 'rev:rel'), '3', 'all three counted');

	# expired permits given back by a call that meets such a count
	$redis->cmd('ZADD', '{rev:rel}:timeout', 1, 'java:1');
	$redis->cmd('SET', 'rev:rel', 'abc');
	is(sqlstate("SELECT rlock_try_permits('rev:rel', 1)"), '58000',
		'an acquire that meets "abc" while giving back an expired permit fails');
	is($redis->cmd('ZCARD', '{rev:rel}:timeout'), 1, 'and the expired permit is still there');
}

#---- an owner's permits given back in part after their lease ended ----
{
	# 1000 permits of another client ending first, then 100 of a session:
	# one call gives back at most 1024, so 24 of the session's go back
	# and 76 stay behind
	my $end = redis_ms() + 200;
	$redis->cmd('SET', 'rev:gap', '200');
	$redis->cmd('ZADD', '{rev:gap}:timeout', map { ($end, "java:$_") } 1 .. 1000);
	my $s = RlockTest::session($node);
	is($s->query_safe("SELECT rlock_session_try_permits('rev:gap', 100, '0', '500ms')"), 't',
		'a session takes 100 permits with a short lease');
	my $total = 1200;
	ok(RlockTest::wait_until(sub { redis_ms() > $end + 600 }, 5), 'all leases ended');
	is(sql("SELECT rlock_available_permits('rev:gap')"), 1124,
		'one call gives back 1024 of the 1100 expired permits');
	$s->query("SELECT rlock_session_try_permits('rev:gap', 1)");
	like($s->{stderr}, qr/was lost/, 'the session learns that its permits were lost');
	$s->{stderr} = '';
	is($s->query_safe("SELECT rlock_held_permits('rev:gap')"), 1, 'it holds the one it took');
	is($redis->cmd('GET', 'rev:gap') + $redis->cmd('ZCARD', '{rev:gap}:timeout'), $total,
		'available and taken permits still add up to the 1200 there are');
	$s->quit;
	ok(RlockTest::wait_until(sub { sql("SELECT rlock_available_permits('rev:gap')") == $total }, 10),
		'once all is given back, all 1200 are available');
}

#---- a permit scored below zero ----
{
	$redis->cmd('SET', 'rev:neg', '0');
	$redis->cmd('ZADD', '{rev:neg}:timeout', '-inf', 'x:1', '-5', 'y:1');
	my $calls = evalsha_calls();
	is(sql("SELECT rlock_try_permits('rev:neg', 1, '2 s')"), 'f',
		'a wait for a permit held for ever ends at its bound');
	cmp_ok(evalsha_calls() - $calls, '<=', 4,
		'having tried only at its start and when told (no retry every few ms)');
}

done_testing();
