# Deadlocks across two instances sharing a Redis
# (rlock.deadlock_detection = global, worker/wfg.c, wfg.lua).
#
# deadlock_timeout is 300 ms on both.  Each cycle: exactly one session
# fails with 40P01 "deadlock detected", its detail naming each wait and
# its instance, within a few deadlock_timeouts; the others commit.
#
# - two rlocks crossed between the instances;
# - an rlock on one instance, a row and an rlock on the other (the cycle
#   closed by a row wait);
# - four sessions, two on each instance, a row and an rlock each side:
#   one rlock waiter is the victim;
# - an advisory lock on one instance closing a cycle through the other;
# - shared holds waited for in exclusive mode; two readers on two
#   instances upgrading; fair locks crossed;
# - a Redisson client holding what one waits for: no victim, the wait runs
#   out by its own bound;
# - rlock.deadlock_detection = local: no victim across instances.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'the search needs no TLS of its own: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my @conf = ("deadlock_timeout = '300ms'", "rlock.deadlock_detection = global",
	'log_min_messages = warning');
my $n1 = RlockTest::node('one', $redis, conf => \@conf);
my $n2 = RlockTest::node('two', $redis, conf => \@conf);
for my $n ($n1, $n2)
{
	$n->safe_psql('postgres', q{
		CREATE TABLE t (id int PRIMARY KEY, v int);
		INSERT INTO t SELECT g, 0 FROM generate_series(1, 10) g;
	});
}

my ($a, $c) = map { RlockTest::session($n1) } 1 .. 2;
my ($b) = RlockTest::session($n2);
my ($pa, $pb, $pc) = map { $_->{rlock_pid} } ($a, $b, $c);

sub victims
{
	my ($t0, @sessions) = @_;
	return RlockTest::deadlock_victims(\@sessions, $t0);
}

#---- two rlocks crossed between the instances ----

$a->query_safe("BEGIN; SELECT rlock_try('g:1')");
$b->query_safe("BEGIN; SELECT rlock_try('g:2')");
RlockTest::send_query($a, "SELECT rlock_try('g:2', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n1, 'g:2');
my $t0 = time;
RlockTest::send_query($b, "SELECT rlock_try('g:1', '60 s'); COMMIT;");
my ($v, $took) = victims($t0, $a, $b);
is(scalar @$v, 1, 'two instances: one session fails with 40P01');
note(sprintf('found after %.2f s', $took // -1));
cmp_ok($took // 99, '<', 10 * 0.3, 'within ten deadlock_timeouts');
my ($out, $err) = RlockTest::collect($v->[0]);
like($err, qr/deadlock detected/, 'deadlock detected');
like($err, qr/Process $pa of instance "one" waits for ExclusiveLock on rlock "g:2"; blocked by process $pb of instance "two"\./,
	"the detail names one's wait, blocked by two's process");
like($err, qr/Process $pb of instance "two" waits for ExclusiveLock on rlock "g:1"; blocked by process $pa of instance "one"\./,
	"and two's wait, blocked by one's");
my $other = $v->[0] == $a ? $b : $a;
($out, $err) = RlockTest::collect($other);
unlike($err, qr/ERROR/, 'the other session gets its lock and commits');

#---- a row on one instance closes a cycle through the other ----

# c (one) holds row 1 and waits for g:3, held by b (two); b waits for g:4,
# held by a (one); a waits for row 1
$c->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 1");
$a->query_safe("BEGIN; SELECT rlock_try('g:4')");
$b->query_safe("BEGIN; SELECT rlock_try('g:3')");
RlockTest::send_query($c, "SELECT rlock_try('g:3', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n1, 'g:3');
RlockTest::send_query($b, "SELECT rlock_try('g:4', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n2, 'g:4');
$t0 = time;
RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 1; COMMIT;");
($v, $took) = victims($t0, $a, $b, $c);
is(scalar @$v, 1, 'a row closes the cycle: one session fails with 40P01');
note(sprintf('found after %.2f s', $took // -1));
isnt($v->[0], $a, 'the victim waits for a lock, not for the row');
($out, $err) = RlockTest::collect($v->[0]);
like($err, qr/waits for ShareLock on transaction \d+; blocked by process $pc of instance "one"/,
	'the detail has the row wait');
for my $s (grep { $_ != $v->[0] } ($a, $b, $c))
{
	($out, $err) = RlockTest::collect($s);
	unlike($err, qr/ERROR/, 'the others go on and commit');
}

#---- four sessions, a row and an rlock on each instance ----

# a (one) holds g:7 and waits for row 2 of one, held by c (one); c waits
# for g:8, held by b (two); b waits for row 2 of two, held by d (two); d
# waits for g:7
{
	my $d = RlockTest::session($n2);
	my $pd = $d->{rlock_pid};
	$c->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 2");
	$d->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 2");
	$a->query_safe("BEGIN; SELECT rlock_try('g:7')");
	$b->query_safe("BEGIN; SELECT rlock_try('g:8')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 2; COMMIT;");
	RlockTest::send_query($b, "UPDATE t SET v = v + 1 WHERE id = 2; COMMIT;");
	RlockTest::send_query($c, "SELECT rlock_try('g:8', '60 s'); COMMIT;");
	RlockTest::waiting_in_sql($n1, 'g:8');
	$t0 = time;
	RlockTest::send_query($d, "SELECT rlock_try('g:7', '60 s'); COMMIT;");
	($v, $took) = victims($t0, $a, $b, $c, $d);
	is(scalar @$v, 1, 'four sessions over two instances: one session fails with 40P01');
	note(sprintf('found after %.2f s', $took // -1));
	ok(@$v && ($v->[0] == $c || $v->[0] == $d), 'the victim waits for a lock');
	($out, $err) = RlockTest::collect($v->[0]);
	like($err, qr/Process $pd of instance "two" waits for ExclusiveLock on rlock "g:7"; blocked by process $pa of instance "one"\./,
		"the detail has d's wait");
	like($err, qr/Process $pb of instance "two" waits for ShareLock on transaction \d+; blocked by process $pd of instance "two"\./,
		"and b's row wait");
	for my $s (grep { $_ != $v->[0] } ($a, $b, $c, $d))
	{
		($out, $err) = RlockTest::collect($s);
		unlike($err, qr/ERROR/, 'the others go on and commit');
	}
	$d->quit;
}

#---- an advisory lock on one instance closes a cycle through the other ----

# c (one) holds advisory lock 42 and waits for g:9, held by b (two); b
# waits for g:10, held by a (one); a waits for advisory lock 42
$c->query_safe("BEGIN; SELECT pg_advisory_xact_lock(42)");
$a->query_safe("BEGIN; SELECT rlock_try('g:10')");
$b->query_safe("BEGIN; SELECT rlock_try('g:9')");
RlockTest::send_query($c, "SELECT rlock_try('g:9', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n1, 'g:9');
RlockTest::send_query($b, "SELECT rlock_try('g:10', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n2, 'g:10');
$t0 = time;
RlockTest::send_query($a, "SELECT pg_advisory_xact_lock(42); COMMIT;");
($v, $took) = victims($t0, $a, $b, $c);
is(scalar @$v, 1, 'an advisory lock closes the cycle: one session fails with 40P01');
note(sprintf('found after %.2f s', $took // -1));
cmp_ok($took // 99, '<', 10 * 0.3, 'within ten deadlock_timeouts');
isnt($v->[0], $a, 'the victim waits for an rlock, not for the advisory lock');
($out, $err) = RlockTest::collect($v->[0]);
like($err, qr/Process $pa of instance "one" waits for ExclusiveLock on advisory lock \[\d+,0,42,1\]; blocked by process $pc of instance "one"\./,
	'the detail has the advisory lock wait');
for my $s (grep { $_ != $v->[0] } ($a, $b, $c))
{
	($out, $err) = RlockTest::collect($s);
	unlike($err, qr/ERROR/, 'the others go on and commit');
}

#---- shared holds waited for in exclusive mode, across instances ----

$a->query_safe("BEGIN; SELECT rlock_try_shared('g:11')");
$b->query_safe("BEGIN; SELECT rlock_try_shared('g:12')");
RlockTest::send_query($a, "SELECT rlock_try('g:12', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n1, 'g:12');
$t0 = time;
RlockTest::send_query($b, "SELECT rlock_try('g:11', '60 s'); COMMIT;");
($v, $took) = victims($t0, $a, $b);
is(scalar @$v, 1, 'shared and exclusive across instances: one session fails with 40P01');
note(sprintf('found after %.2f s', $took // -1));
cmp_ok($took // 99, '<', 10 * 0.3, 'within ten deadlock_timeouts');
($out, $err) = RlockTest::collect($v->[0]);
like($err, qr/waits for ExclusiveLock on rlock "g:1[12]"; blocked by process \d+ of instance "(one|two)"\./,
	'the detail names the exclusive waits');
$other = $v->[0] == $a ? $b : $a;
($out, $err) = RlockTest::collect($other);
unlike($err, qr/ERROR/, 'the other session gets its lock and commits');

#---- an upgrade across instances ----

# two readers on two instances both upgrade: each waits for the other's
# shared hold; one victim, the other then gets the lock exclusively
$a->query_safe("BEGIN; SELECT rlock_try_shared('g:13')");
$b->query_safe("BEGIN; SELECT rlock_try_shared('g:13')");
RlockTest::send_query($a, "SELECT rlock_try('g:13', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n1, 'g:13');
$t0 = time;
RlockTest::send_query($b, "SELECT rlock_try('g:13', '60 s'); COMMIT;");
($v, $took) = victims($t0, $a, $b);
is(scalar @$v, 1, 'an upgrade on each instance: one session fails with 40P01');
note(sprintf('found after %.2f s', $took // -1));
cmp_ok($took // 99, '<', 10 * 0.3, 'within ten deadlock_timeouts');
($out, $err) = RlockTest::collect($v->[0]);
like($err, qr/waits for ExclusiveLock on rlock "g:13"; blocked by process \d+ of instance "(one|two)"\./,
	'the detail names the upgrades');
$other = $v->[0] == $a ? $b : $a;
($out, $err) = RlockTest::collect($other);
unlike($err, qr/ERROR/, 'the other upgrades and commits');
is($redis->cmd('EXISTS', 'g:13'), 0, 'and the lock is free after');

#---- fair locks crossed between the instances ----

$a->query_safe("BEGIN; SELECT rlock_try_fair('g:14')");
$b->query_safe("BEGIN; SELECT rlock_try_fair('g:15')");
RlockTest::send_query($a, "SELECT rlock_try_fair('g:15', '60 s'); COMMIT;");
RlockTest::waiting_in_sql($n1, 'g:15');
$t0 = time;
RlockTest::send_query($b, "SELECT rlock_try_fair('g:14', '60 s'); COMMIT;");
($v, $took) = victims($t0, $a, $b);
is(scalar @$v, 1, 'fair locks across instances: one session fails with 40P01');
note(sprintf('found after %.2f s', $took // -1));
($out, $err) = RlockTest::collect($v->[0]);
like($err, qr/waits for ExclusiveLock on fair rlock "g:1[45]"; blocked by process \d+ of instance "(one|two)"\./,
	'the detail names the fair waits');
$other = $v->[0] == $a ? $b : $a;
($out, $err) = RlockTest::collect($other);
unlike($err, qr/ERROR/, 'the other session gets its lock and commits');

#---- a Redisson client in the way ----

$redis->cmd('HSET', 'g:5', 'dead0000-1111-4222-8333-444455556666:42', 1);
$redis->cmd('PEXPIRE', 'g:5', 60000);
$a->query_safe("BEGIN; SELECT rlock_try('g:6')");
# b's wait runs out first (a's end would give b the lock)
RlockTest::send_query($a, "SELECT rlock_try('g:5', '5 s'); COMMIT;");
RlockTest::send_query($b, "BEGIN; SELECT rlock_try('g:6', '2 s'); COMMIT;");
($out, $err) = RlockTest::collect($b);
is($out, 'f', 'a Redisson client in the way: no victim, the wait runs out');
unlike($err, qr/40P01/, 'no deadlock reported');
RlockTest::collect($a);
$redis->cmd('DEL', 'g:5');

#---- the graph in Redis ----

ok( RlockTest::wait_until(
		sub { $redis->cmd('HLEN', 'rlock_wfg:{rlock_wfg}:nodes') == 0 }, 10),
	'no wait left in the graph once nothing waits');

$_->quit for ($a, $b, $c);
$n1->stop;
$n2->stop;
$redis->stop;
done_testing();
