# Semaphores (rlock_try_permits and its forms) between sessions of two
# instances, on Redisson's permit-expirable layout:
#
# - a waiter is woken by the holder's commit, and sees what the holder's
#   transaction wrote (the permits come back after the commit is
#   visible); a release of 3 permits wakes 3 waiters of 1 at once;
# - the layout: the available count at NAME, one ZSET member per permit
#   at {NAME}:timeout, scored by its lease's end (Redis's clock), and the
#   count published on redisson_sc:{NAME};
# - the watchdog renews permits taken without a lease; a lease that runs
#   out gives them back to the next caller, and the holder learns it (a
#   commit fails with 40001, a session hold is reported lost);
# - a holder terminated gives its permits back at once; one killed with
#   SIGKILL (the instance restarts) keeps them until their lease ends,
#   then they come back;
# - rlock_locks shows holders and waiters with their permits.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'semaphores do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @conf = ("rlock.watchdog_timeout = '1500ms'", 'restart_after_crash = on');
my $na = RlockTest::node('sem_a', $redis, conf => [@conf]);
my $nb = RlockTest::node('sem_b', $redis, conf => [@conf]);

sub sql { return $na->safe_psql('postgres', $_[0]) }
sub available { return $redis->cmd('GET', $_[0]) // 0 }
sub permits { return { @{ $redis->cmd('ZRANGE', "{$_[0]}:timeout", 0, -1, 'WITHSCORES') } } }

sub redis_ms
{
	my ($s, $us) = @{ $redis->cmd('TIME') };
	return $s * 1000 + int($us / 1000);
}

#---- a waiter woken by a commit, after the commit is visible ----
{
	sql("SELECT rlock_set_permits('sem:a', 2)");
	sql('CREATE TABLE written (v int)');
	my $h = RlockTest::session($na);
	$h->query_safe("BEGIN; SELECT rlock_try_permits('sem:a', 2); INSERT INTO written VALUES (1)");
	is(available('sem:a'), '0', 'two permits taken: none available');
	my %p = %{ permits('sem:a') };
	is(scalar(keys %p), 2, 'one member per permit in {sem:a}:timeout');
	my $now = redis_ms();
	ok((grep { $_ > $now && $_ <= $now + 1600 } values %p) == 2,
		'scored by the end of a watchdog lease, on Redis\'s clock');
	like((keys %p)[0], qr/^[0-9a-f-]{36}:\d+:[12]$/, 'members are <owner>:<i>');

	my $w = RlockTest::session($na);
	RlockTest::send_query($w,
		"SELECT rlock_acquire_permits('sem:a', 1); SELECT count(*) FROM written;");
	ok(RlockTest::waiting_in_sql($na, 'sem:a'), 'a waiter for one permit waits');
	my $t0 = time;
	$h->query_safe('COMMIT');
	my ($out, $err) = RlockTest::collect($w);
	my $took = time - $t0;
	like($out, qr/^\n?1$/m, 'woken by the commit, it sees the holder\'s row');
	cmp_ok($took, '<', 1, "at once ($took s), not at a lease's end");
	$w->query_safe('SELECT 1');
	ok(RlockTest::wait_until(sub { available('sem:a') eq '2' }, 5),
		'the waiter\'s statement ended: both back');
	$h->quit;
	$w->quit;
}

#---- a release of three permits wakes three waiters, of both instances ----
{
	sql("SELECT rlock_set_permits('sem:b', 3)");
	my $h = RlockTest::session($na);
	$h->query_safe("SELECT rlock_session_try_permits('sem:b', 3)");
	my @w = map { RlockTest::session($_) } ($na, $na, $nb);
	RlockTest::send_query($_, "BEGIN; SELECT rlock_try_permits('sem:b', 1, '20 s');") for @w;
	ok( RlockTest::wait_until(
			sub {
				$na->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key = 'sem:b' AND state = 'waiting'") == 2
				  && $nb->safe_psql('postgres', "SELECT count(*) FROM rlock_locks WHERE key = 'sem:b' AND state = 'waiting'") == 1;
			}, 10),
		'three waiters, two here and one on the other instance');
	is($na->safe_psql('postgres',
		"SELECT count, state FROM rlock_locks WHERE key = 'sem:b' AND state = 'held'"),
		'3|held', 'rlock_locks shows the holder\'s three permits');
	my $t0 = time;
	is($h->query_safe("SELECT rlock_session_release_permits('sem:b', 3)"), 't', 'released');
	my @got = map { (RlockTest::collect($_))[0] } @w;
	my $took = time - $t0;
	is(join(',', map { /(t|f)\s*$/ ? $1 : '?' } @got), 't,t,t', 'all three waiters got a permit');
	cmp_ok($took, '<', 1, "at once ($took s)");
	is(available('sem:b'), '0', 'none left');
	$_->query_safe('COMMIT') for @w;
	ok(RlockTest::wait_until(sub { available('sem:b') eq '3' }, 5),
		'all back after their commits');
	$_->quit for ($h, @w);
}

#---- a waiter for many permits does not hold back one for fewer ----
{
	sql("SELECT rlock_set_permits('sem:e', 2)");
	my $h = RlockTest::session($na);
	$h->query_safe("SELECT rlock_session_try_permits('sem:e')");
	my $big = RlockTest::session($na);
	RlockTest::send_query($big, "SELECT rlock_try_permits('sem:e', 2, '20 s');");
	ok(RlockTest::waiting_in_sql($na, 'sem:e'), 'a waiter for 2 permits, 1 available');
	my ($rc, $out, $err, $took) = RlockTest::timed_psql($na,
		"SELECT rlock_try_permits('sem:e', 1, '5 s')");
	is($out, 't', 'a later call for 1 permit on the same instance gets it');
	cmp_ok($took, '<', 1, "at once ($took s): no line of waiters forms ahead of it");
	$h->query_safe("SELECT rlock_session_release_permits('sem:e')");
	my ($o) = RlockTest::collect($big);
	is($o, 't', 'the release wakes the waiter for 2');
	$_->quit for ($h, $big);
}

#---- the watchdog; a lease that runs out ----
{
	sql("SELECT rlock_set_permits('sem:c', 1)");
	my $s = RlockTest::session($na);
	$s->query_safe("SELECT rlock_session_try_permits('sem:c')");
	my ($m) = keys %{ permits('sem:c') };
	my $first = permits('sem:c')->{$m};
	ok(RlockTest::wait_until(sub { (permits('sem:c')->{$m} // 0) > $first + 500 }, 5),
		'the watchdog pushes the permit\'s lease end forward');
	ok(RlockTest::wait_until(sub { redis_ms() > $first + 2000 }, 5) && permits('sem:c')->{$m},
		'past its first lease the permit is still held');
	is($s->query_safe("SELECT rlock_session_release_permits('sem:c')"), 't', 'released');
	is(available('sem:c'), '1', 'and back');

	# a lease of 300 ms, in a transaction: taken back by the next caller
	$s->query_safe("BEGIN; SELECT rlock_try_permits('sem:c', 1, '0', '300 ms')");
	ok(RlockTest::wait_until(sub { sql("SELECT rlock_session_try_permits('sem:c')") eq 't' }, 5),
		'after the lease ends, another session gets the permit');
	$s->query('COMMIT');
	like($s->{stderr}, qr/40001/, 'the holder whose lease ran out fails its commit with 40001');
	$s->{stderr} = '';
	$s->quit;
}

#---- a release after the lease ran out does not bring the permits back ----
{
	sql("SELECT rlock_set_permits('sem:f', 2)");
	my $s = RlockTest::session($na);
	$s->query_safe("SELECT rlock_session_try_permits('sem:f', 2, '0', '300 ms')");
	my $end = (sort { $b <=> $a } values %{ permits('sem:f') })[0];
	ok(RlockTest::wait_until(sub { redis_ms() > $end + 50 }, 5), 'the lease ran out, nobody reclaimed yet');
	is($s->query("SELECT rlock_session_release_permits('sem:f', 1)"), 'f',
		'giving back one of the two finds them gone');
	like($s->{stderr}, qr/no longer held in Redis/, 'with a warning');
	$s->{stderr} = '';
	is(available('sem:f'), '2', 'both are back in the count');
	is(scalar(keys %{ permits('sem:f') }), 0, 'and none is leased again');
	$s->quit;
}

#---- termination gives permits back at once; SIGKILL at the lease's end ----
{
	sql("SELECT rlock_set_permits('sem:d', 2)");
	my $s = RlockTest::session($na);
	$s->query_safe("BEGIN; SELECT rlock_try_permits('sem:d', 2)");
	sql("SELECT pg_terminate_backend($s->{rlock_pid})");
	ok(RlockTest::wait_until(sub { available('sem:d') eq '2' }, 3),
		'a terminated holder\'s permits come back at once');
	is(scalar(keys %{ permits('sem:d') }), 0, 'no member left');

	my $k = RlockTest::session($nb);
	$k->query_safe("BEGIN; SELECT rlock_try_permits('sem:d', 2)");
	my $deadline = (sort { $b <=> $a } values %{ permits('sem:d') })[0];
	kill 'KILL', $k->{rlock_pid};
	ok(RlockTest::wait_back($nb, 60), 'the instance restarts after the SIGKILL');
	my $back = RlockTest::wait_until(
		sub { sql("SELECT rlock_available_permits('sem:d')") eq '2' }, 10);
	my $at = redis_ms();
	ok($back, 'the killed holder\'s permits come back');
	cmp_ok($at, '>=', $deadline, 'not before their lease ended');
	cmp_ok($at, '<', $deadline + 3000, 'soon after it ended');
}

#---- Redis refuses what is not a semaphore ----
{
	$redis->cmd('HSET', 'sem:hash', 'f', 1);
	my ($rc, $out, $err) = RlockTest::timed_psql($na,
		"SELECT rlock_try_permits('sem:hash')");
	like($err, qr/58000/, 'a hash at the name: 58000');
	is($redis->cmd('TYPE', 'sem:hash'), 'hash', 'and it is left as it was');
	is($na->safe_psql('postgres', 'SELECT count(*) FROM rlock_locks'), '0', 'nothing held');
}

done_testing();
