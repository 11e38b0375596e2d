# Deadlocks through rlock waits among the sessions of one instance
# (rlock.deadlock_detection = local, backend/deadlock.c).
#
# Each cycle below is closed by the last wait its script starts; exactly
# one session fails with 40P01 "deadlock detected", within
# deadlock_timeout (500 ms here) and a second of the closing wait, with a
# detail line per wait in PostgreSQL's words; the others go on and commit.
# pg_stat_database.deadlocks counts each, the server log has the queries.
#
# - two rlocks, each session holding one and waiting for the other;
# - an rlock and a row (the holder of the rlock waits for the row);
# - an rlock and an advisory lock;
# - shared holds waited for in exclusive mode (two keys, crossed);
# - an upgrade: two sessions hold a lock shared, each asks for it
#   exclusively;
# - three sessions: a row and two rlocks;
# - a fair lock and a row; session-scoped waits (the victim keeps its
#   session locks, as PostgreSQL keeps session advisory locks);
# - no cycle: a holder that is merely slow, a holder that waits for a row
#   of a third session that then commits: no error;
# - rlock.deadlock_detection = off: the rlock-and-row cycle ends by
#   lock_timeout (55P03), as it did before detection;
# - the setting is for superusers;
# - who blocks a wait: rlock_blocking_pids() names the local holder, and
#   nobody for a holder elsewhere; rlock_waits adds whoever holds the key
#   in Redis: a session of this instance, one of another instance (its
#   name and pid), a Redisson client.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'deadlock detection reads no Redis: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('dl', $redis,
	conf => [ "deadlock_timeout = '500ms'", 'log_min_messages = warning' ]);
$node->safe_psql('postgres', q{
	CREATE TABLE t (id int PRIMARY KEY, v int);
	INSERT INTO t SELECT g, 0 FROM generate_series(1, 10) g;
	CREATE ROLE plain_user LOGIN;
});

my @s = map { RlockTest::session($node) } 1 .. 4;

sub deadlocks { return RlockTest::deadlocks($node, @_) }

# Run @steps ([session, sql, waits?]) in order; the last one closes the
# cycle.  A step that waits commits once its statement ends (the victim's
# COMMIT rolls back), so that every wait of a chain ends in turn.
# Returns the sessions that waited, and when the closing wait began.
sub run_cycle
{
	my (@steps) = @_;
	my @waited;
	my $t0;
	for my $i (0 .. $#steps)
	{
		my ($sess, $sql, $wait) = @{ $steps[$i] };
		if ($wait)
		{
			RlockTest::send_query($sess, "$sql COMMIT;");
			$t0 = time;
			RlockTest::in_wait($sess) or die "no wait: $sql" if $i < $#steps;
			push @waited, $sess;
		}
		else
		{
			my ($out, $err) = ($sess->query($sql), $sess->{stderr});
			$sess->{stderr} = '';
			die "$sql: $err" if $err =~ /ERROR/;
		}
	}
	return \@waited, $t0;
}

# A cycle closed by its last step: one victim among the sessions that
# waited ($expect_victim if defined: the only rlock waiter), found in
# time, its error's detail matching each of @$detail; the victim rolls
# back, the others commit.
sub one_victim
{
	my ($name, $expect_victim, $detail, @steps) = @_;
	my $before = deadlocks();
	my ($waited, $t0) = run_cycle(@steps);
	my ($victims, $took) = RlockTest::deadlock_victims($waited, $t0);
	is(scalar @$victims, 1, "$name: one session fails with 40P01");
	my $victim = $victims->[0];
	my ($out, $err) = RlockTest::collect($victim);
	like($err, qr/ERROR:  40P01: deadlock detected/, "$name: deadlock detected");
	like($err, $_, "$name: the detail names each wait") for @$detail;
	is($victim, $expect_victim, "$name: the victim is the session whose wait closed the cycle")
	  if $expect_victim;
	cmp_ok($took // 99, '<', 0.5 + 1,
		sprintf("$name: within deadlock_timeout and a second (%.2f s)", $took // -1));
	for my $s (@$waited)
	{
		next if $s == $victim;
		my ($o, $e) = RlockTest::collect($s);
		unlike($e, qr/ERROR/, "$name: the other waiter goes on and commits")
		  or diag($e);
	}
	# the victim's counts reach the statistics at its next statement's end
	ok(RlockTest::wait_until(sub { deadlocks($victim) == $before + 1 }, 10),
		"$name: pg_stat_database counts one deadlock");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM rlock_locks WHERE scope = 'transaction' OR state <> 'held'"),
		0, "$name: nothing left held or waiting");
	return $victim;
}

my ($a, $b, $c) = @s;
my ($pa, $pb, $pc) = map { $_->{rlock_pid} } @s;

#---- two rlocks ----

# the first to look after the cycle closed is the victim, as with
# PostgreSQL's own deadlock checks: either of two rlock waiters
one_victim('two rlocks', undef,
	[ qr/DETAIL:  Process \d+ waits for ExclusiveLock on rlock "dl:\d"; blocked by process \d+\.\nProcess \d+ waits for ExclusiveLock on rlock "dl:\d"; blocked by process \d+\./,
	  qr/Process $pb waits for ExclusiveLock on rlock "dl:1"; blocked by process $pa\./,
	  qr/Process $pa waits for ExclusiveLock on rlock "dl:2"; blocked by process $pb\./ ],
	[ $a, "BEGIN; SELECT rlock_try('dl:1');" ],
	[ $b, "BEGIN; SELECT rlock_try('dl:2');" ],
	[ $a, "SELECT rlock_try('dl:2', '60 s');", 1 ],
	[ $b, "SELECT rlock_try('dl:1', '60 s');", 1 ]);

#---- an rlock and a row ----

one_victim('rlock and row', $b,
	[ qr/DETAIL:  Process $pb waits for ExclusiveLock on rlock "dl:r"; blocked by process $pa\.\nProcess $pa waits for ShareLock on transaction \d+; blocked by process $pb\./ ],
	[ $b, "BEGIN; UPDATE t SET v = v + 1 WHERE id = 1;" ],
	[ $a, "BEGIN; SELECT rlock_try('dl:r');" ],
	[ $a, "UPDATE t SET v = v + 1 WHERE id = 1;", 1 ],
	[ $b, "SELECT rlock_try('dl:r', '60 s');", 1 ]);
is($node->safe_psql('postgres', 'SELECT v FROM t WHERE id = 1'), 1,
	'the update of the session that was not the victim committed');

#---- an rlock and an advisory lock ----

one_victim('rlock and advisory lock', $b,
	[ qr/DETAIL:  Process $pb waits for ExclusiveLock on rlock "dl:a"; blocked by process $pa\.\nProcess $pa waits for ExclusiveLock on advisory lock \[\d+,0,42,1\]; blocked by process $pb\./ ],
	[ $b, "BEGIN; SELECT pg_advisory_xact_lock(42);" ],
	[ $a, "BEGIN; SELECT rlock_try('dl:a');" ],
	[ $a, "SELECT pg_advisory_xact_lock(42);", 1 ],
	[ $b, "SELECT rlock_try('dl:a', '60 s');", 1 ]);

#---- shared holds waited for in exclusive mode ----

one_victim('shared and exclusive', undef,
	[ qr/Process $pb waits for ExclusiveLock on rlock "dl:s1"; blocked by process $pa\./,
	  qr/Process $pa waits for ExclusiveLock on rlock "dl:s2"; blocked by process $pb\./ ],
	[ $a, "BEGIN; SELECT rlock_try_shared('dl:s1');" ],
	[ $b, "BEGIN; SELECT rlock_try_shared('dl:s2');" ],
	[ $a, "SELECT rlock_try('dl:s2', '60 s');", 1 ],
	[ $b, "SELECT rlock_try('dl:s1', '60 s');", 1 ]);

#---- an upgrade: two sessions share a lock, each asks for it exclusively ----

# each upgrade waits for the other's shared hold: one victim, and the
# survivor, the lock's only holder once the victim's shared hold goes
# with its transaction, gets it exclusively
one_victim('shared to exclusive upgrade', undef,
	[ qr/Process $pb waits for ExclusiveLock on rlock "dl:u"; blocked by process $pa\./,
	  qr/Process $pa waits for ExclusiveLock on rlock "dl:u"; blocked by process $pb\./ ],
	[ $a, "BEGIN; SELECT rlock_try_shared('dl:u');" ],
	[ $b, "BEGIN; SELECT rlock_try_shared('dl:u');" ],
	[ $a, "SELECT rlock_try('dl:u', '60 s');", 1 ],
	[ $b, "SELECT rlock_try('dl:u', '60 s');", 1 ]);

#---- three sessions: a row and two rlocks ----

one_victim('three sessions', undef,
	[ qr/Process $pc waits for ExclusiveLock on rlock "dl:t2"; blocked by process $pb\./,
	  qr/Process $pb waits for ExclusiveLock on rlock "dl:t1"; blocked by process $pa\./,
	  qr/Process $pa waits for ShareLock on transaction \d+; blocked by process $pc\./ ],
	[ $c, "BEGIN; UPDATE t SET v = v + 1 WHERE id = 3;" ],
	[ $a, "BEGIN; SELECT rlock_try('dl:t1');" ],
	[ $b, "BEGIN; SELECT rlock_try('dl:t2');" ],
	[ $a, "UPDATE t SET v = v + 1 WHERE id = 3;", 1 ],
	[ $b, "SELECT rlock_try('dl:t1', '60 s');", 1 ],
	[ $c, "SELECT rlock_try('dl:t2', '60 s');", 1 ]);

#---- a fair lock and a row, session-scoped ----

one_victim('fair lock and row', $b,
	[ qr/Process $pb waits for ExclusiveLock on fair rlock "dl:f"; blocked by process $pa\./ ],
	[ $b, "BEGIN; SELECT rlock_session_try('dl:kept'); UPDATE t SET v = v + 1 WHERE id = 4;" ],
	[ $a, "BEGIN; SELECT rlock_try_fair('dl:f');" ],
	[ $a, "UPDATE t SET v = v + 1 WHERE id = 4;", 1 ],
	[ $b, "SELECT rlock_session_try_fair('dl:f', '60 s');", 1 ]);
is($node->safe_psql('postgres',
		"SELECT pid, scope, state FROM rlock_locks WHERE key = 'dl:kept'"),
	"$pb|session|held", 'the victim keeps its session lock');
$b->query_safe("SELECT rlock_session_release('dl:kept')");

#---- the log ----

my $log = slurp_file($node->logfile);
like($log, qr/ERROR:  deadlock detected\n.*DETAIL:  Process $pb waits for ExclusiveLock on rlock "dl:r"; blocked by process $pa\.\n\s*Process $pa waits for ShareLock on transaction \d+; blocked by process $pb\.\n\s*Process $pb: SELECT rlock_try\('dl:r', '60 s'\);\n\s*Process $pa: UPDATE t SET v = v \+ 1 WHERE id = 1;/,
	'the server log has each process\'s query');

#---- no cycle ----

{
	my $before = deadlocks();
	# a holder merely slow: it sleeps three deadlock_timeouts, then commits
	$a->query_safe("BEGIN; SELECT rlock_try('dl:slow')");
	RlockTest::send_query($a, "SELECT pg_sleep(1.5); COMMIT;");
	RlockTest::send_query($b, "BEGIN; SELECT rlock_try('dl:slow', '60 s');");
	my ($out, $err) = RlockTest::collect($b);
	is($out, 't', 'a slow holder: the waiter gets the lock') or diag($err);
	RlockTest::collect($a);
	$b->query_safe('COMMIT');

	# the holder waits for a row of a third session, which commits later
	$c->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 5");
	$a->query_safe("BEGIN; SELECT rlock_try('dl:chain')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 5; COMMIT;");
	RlockTest::in_wait($a);
	RlockTest::send_query($b, "BEGIN; SELECT rlock_try('dl:chain', '60 s');");
	RlockTest::in_wait($b);
	RlockTest::wait_until(sub { 0 }, 1.5);    # three deadlock_timeouts
	$c->query_safe('COMMIT');
	($out, $err) = RlockTest::collect($b);
	is($out, 't', 'a chain without a cycle: the waiter gets the lock') or diag($err);
	RlockTest::collect($a);
	$b->query_safe('COMMIT');
	is(deadlocks(), $before, 'no deadlock counted without a cycle');
}

#---- detection off ----

{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET rlock.deadlock_detection = off; SELECT pg_reload_conf()");
	RlockTest::wait_until(
		sub { $b->query_safe('SHOW rlock.deadlock_detection') eq 'off' }, 10);
	my $before = deadlocks();
	$b->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 6");
	$a->query_safe("BEGIN; SELECT rlock_try('dl:off')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 6;");
	RlockTest::in_wait($a);
	RlockTest::send_query($b, "SET lock_timeout = '2s'; SELECT rlock_lock('dl:off');");
	my ($out, $err) = RlockTest::collect($b);
	like($err, qr/55P03/, 'detection off: lock_timeout ends the cycle');
	$b->query('ROLLBACK');
	RlockTest::collect($a);
	$a->query_safe('COMMIT');
	is(deadlocks(), $before, 'and no deadlock is counted');
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET rlock.deadlock_detection; SELECT pg_reload_conf()");
}

#---- who blocks a wait ----

{
	my $other = RlockTest::node('other', $redis);
	my $o = RlockTest::session($other);
	my $po = $o->{rlock_pid};
	my $waits = "SELECT blocking_pids, holder, instance, holder_pid, holder_owners"
	  . " FROM rlock_waits WHERE pid = $pb";

	# a session of this instance
	$a->query_safe("SELECT rlock_session_try('dl:v')");
	RlockTest::send_query($b, "SELECT rlock_try('dl:v', '30 s');");
	RlockTest::waiting_in_sql($node, 'dl:v');
	is($node->safe_psql('postgres', "SELECT rlock_blocking_pids($pb)"), "{$pa}",
		'rlock_blocking_pids names the local holder');
	ok( RlockTest::wait_until(
			sub { $node->safe_psql('postgres', $waits) eq "{$pa}|rlock|dl|$pa|1" }),
		'rlock_waits: the local holder, by pid, and as Redis has it')
	  or diag($node->safe_psql('postgres', $waits));
	is($node->safe_psql('postgres', "SELECT rlock_blocking_pids($pa)"), '{}',
		'a session that waits for nothing: an empty array');
	$a->query_safe("SELECT rlock_session_release('dl:v')");
	is((RlockTest::collect($b))[0], 't', 'the waiter gets the lock');

	# a session of another instance
	$o->query_safe("SELECT rlock_session_try('dl:v2')");
	RlockTest::send_query($b, "SELECT rlock_try('dl:v2', '30 s');");
	RlockTest::waiting_in_sql($node, 'dl:v2');
	is($node->safe_psql('postgres', "SELECT rlock_blocking_pids($pb)"), '{}',
		'a holder on another instance: no local pid');
	ok( RlockTest::wait_until(
			sub { $node->safe_psql('postgres', $waits) eq "{}|rlock|other|$po|1" }),
		'rlock_waits: the other instance by name, and its pid')
	  or diag($node->safe_psql('postgres', $waits));
	$o->query_safe("SELECT rlock_session_release('dl:v2')");
	is((RlockTest::collect($b))[0], 't', 'the waiter gets the lock');

	# a Redisson client
	$redis->cmd('HSET', 'dl:v3', 'dead0000-1111-4222-8333-444455556666:42', 1);
	$redis->cmd('PEXPIRE', 'dl:v3', 30000);
	RlockTest::send_query($b, "SELECT rlock_try('dl:v3', '30 s');");
	RlockTest::waiting_in_sql($node, 'dl:v3');
	is($node->safe_psql('postgres', $waits), '{}|redisson|||1',
		'rlock_waits: a Redisson client, no instance or pid');
	$redis->cmd('DEL', 'dl:v3');
	$redis->cmd('PUBLISH', 'redisson_lock__channel:{dl:v3}', 0);
	is((RlockTest::collect($b))[0], 't', 'the waiter gets the lock');
	$o->quit;
	$other->stop;
}

my ($rc, $out, $err) = $node->psql('postgres',
	'SET rlock.deadlock_detection = off', extra_params => [ '-U', 'plain_user' ]);
like($err, qr/permission denied to set parameter "rlock.deadlock_detection"/,
	'only a superuser turns detection off');

$_->quit for @s;
$node->stop;
$redis->stop;
done_testing();
