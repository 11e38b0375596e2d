# Review of deadlock detection within one instance (backend/deadlock.c,
# test 102) against races, faults and waits that only look like cycles.
# Every case ends with nothing held or waiting in rlock_locks:
#
# - a cycle through a hold with a lease (rlock_try(key, wait, lease)) is
#   a deadlock like any other: the waiter fails with 40P01 and the holder
#   commits with its lock.  Left to its lease, the cycle would end later
#   and fail the holder instead, at commit (40001, its lock lost);
# - two and three rlock waiters in one cycle, deadlock_timeout = 10 ms so
#   that their looks meet, 40 cycles: exactly one 40P01 each;
# - 30 sessions waiting for one key whose holder waits for a row of one of
#   them: that one alone fails, the 29 others get the lock in turn;
# - 50 sessions waiting for one key whose holder waits for a row of a
#   session that commits later, looks every 10 ms: no 40P01, and the
#   looks cost little CPU;
# - the holder releasing its rlock and then waiting for the waiter's row,
#   60 times with varying delays; three sessions taking and releasing one
#   key 300 times each while a fourth waits for a row of one of them: no
#   40P01;
# - the holder's row wait cancelled by statement_timeout near the
#   waiter's confirming look: the waiter gets the lock or is the one
#   victim, nothing else;
# - lock_timeout shorter than deadlock_timeout: 55P03, no deadlock;
# - a row held by a prepared transaction (no process): no victim, the
#   chain goes on after COMMIT PREPARED;
# - a parallel worker of the holder waiting for a table the waiter locked:
#   the cycle is found through the worker's lock group;
# - a holder in Redis that is not a session here (a Redisson client): a
#   dead end, no victim;
# - the rlock worker stopped (SIGSTOP) while a cycle exists: found all the
#   same, the victim's session answers, the other waiter gets the lock
#   once the worker runs again;
# - waiters and the holder terminated (pg_terminate_backend) while the
#   others look every 10 ms;
# - no crash or failed assertion in the server log.
use strict;
use warnings;

use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RlockTest;
use RlockTest::Redis;
use RlockTest::TLS;

plan skip_all => 'deadlock detection reads no Redis: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('dlr', $redis,
	conf => [
		"deadlock_timeout = '500ms'", 'log_min_messages = warning',
		'max_prepared_transactions = 2', 'max_connections = 100'
	]);
$node->safe_psql('postgres', q{
	CREATE TABLE t (id int PRIMARY KEY, v int);
	INSERT INTO t SELECT g, 0 FROM generate_series(1, 100) g;
	CREATE TABLE u (x int);
	CREATE FUNCTION count_u() RETURNS bigint LANGUAGE plpgsql PARALLEL SAFE
	  AS $$ BEGIN RETURN (SELECT count(*) FROM u); END $$;
});
my $foreign = '0b7e9c1d-2f3a-4b5c-9d6e-7f8091a2b3c4:1';

# Deadlocks counted in pg_stat_database, once each of @$flush has sent
# its counts (a victim's reach the statistics at its next statement)
sub deadlocks
{
	my ($flush) = @_;
	return RlockTest::deadlocks($node, @{ $flush // [] });
}

sub waits { return RlockTest::in_wait(@_) }

sub nothing_left
{
	my ($name) = @_;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM rlock_locks'),
		0, "$name: nothing left held or waiting");
}

# CPU time (seconds) the processes @pids have used so far
sub cpu_seconds
{
	my $ticks = 0;
	for my $pid (@_)
	{
		open my $f, '<', "/proc/$pid/stat" or next;
		my @f = split ' ', (<$f> =~ s/^.*\) //r);
		$ticks += $f[11] + $f[12];    # utime, stime
	}
	return $ticks / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

sub sessions
{
	my ($n, $timeout) = @_;
	my @w = map { RlockTest::session($node) } 1 .. $n;
	$_->query_safe("SET deadlock_timeout = '$timeout'") for @w;
	return @w;
}

my @s = map { RlockTest::session($node) } 1 .. 4;
my ($a, $b, $c, $d) = @s;

#---- a cycle through a leased hold ----
{
	my $before = deadlocks(\@s);
	$b->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 1");
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:lease', '0', '20 s')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 1; COMMIT;");
	waits($a);
	RlockTest::send_query($b, "SELECT rlock_try('dlr:lease', '60 s'); COMMIT;");
	my ($out, $err) = RlockTest::collect($b);
	like($err, qr/40P01: deadlock detected/,
		'leased hold: the waiter is the victim, before the lease ends');
	($out, $err) = RlockTest::collect($a);
	is($err, '', 'leased hold: its holder commits, its lock not lost');
	ok(RlockTest::wait_until(sub { deadlocks(\@s) == $before + 1 }, 10),
		'leased hold: one deadlock counted');
	nothing_left('leased hold');
}

#---- two and three rlock waiters looking at the same moments ----
{
	my $before = deadlocks(\@s);
	$_->query_safe("SET deadlock_timeout = '10ms'") for @s;
	my %victims;
	for my $round (1 .. 40)
	{
		my $k = "dlr:race$round";
		my @m = $round % 2 ? ($a, $b) : ($a, $b, $c);
		$m[$_]->query_safe("BEGIN; SELECT rlock_try('$k:$_')") for 0 .. $#m;
		for my $i (0 .. $#m)
		{
			my $j = ($i + 1) % @m;
			RlockTest::send_query($m[$i],
				"SELECT rlock_try('$k:$j', '20 s'); COMMIT;");
		}
		my ($v, $other) = (0, '');
		for my $s (@m)
		{
			my ($o, $e) = RlockTest::collect($s);
			$v++ if $e =~ /40P01/;
			$other .= $e if $e =~ /ERROR/ && $e !~ /40P01/;
		}
		$victims{$v}++;
		is($other, '', "race round $round: no other error");
	}
	is_deeply(\%victims, { 1 => 40 }, 'race: one victim in each of 40 cycles');
	is(scalar @{ $redis->cmd('KEYS', 'dlr:race*') }, 0, 'race: no key left in Redis');
	is(deadlocks(\@s), $before + 40, 'race: 40 deadlocks counted');
	nothing_left('race');
	$_->query_safe('RESET deadlock_timeout') for @s;
}

#---- many waiters, one of them in the cycle ----
{
	my @w = sessions(30, '10ms');
	my $before = deadlocks(\@s);
	$w[7]->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 51");
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:many')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 51; COMMIT;");
	waits($a);
	RlockTest::send_query($_,
		($_ == $w[7] ? '' : 'BEGIN;')
		  . "SELECT rlock_try('dlr:many', '60 s'); COMMIT;")
	  for @w;
	my @victims;
	my $other = '';
	for my $s (@w)
	{
		my ($o, $e) = RlockTest::collect($s);
		push @victims, $s->{rlock_pid} if $e =~ /40P01/;
		$other .= $e if $e =~ /ERROR/ && $e !~ /40P01/;
	}
	is_deeply(\@victims, [ $w[7]{rlock_pid} ],
		'many waiters: only the one holding the row is the victim');
	is($other, '', 'many waiters: the others get the lock');
	my ($o, $e) = RlockTest::collect($a);
	unlike($e, qr/ERROR/, 'many waiters: the holder commits');
	is(deadlocks([ @w, @s ]), $before + 1, 'many waiters: one deadlock counted');
	nothing_left('many waiters');
	$_->quit for @w;
}

#---- many waiters, no cycle: no victim, cheap looks ----
{
	my @w = sessions(50, '10ms');
	my @pids = map { $_->{rlock_pid} } @w;
	my $before = deadlocks(\@s);
	$c->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 50");
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:none')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 50; COMMIT;");
	waits($a);
	RlockTest::send_query($_,
		"BEGIN; SELECT rlock_try('dlr:none', '60 s'); COMMIT;")
	  for @w;
	ok( RlockTest::wait_until(
			sub { RlockTest::count_waiting($node, @pids) == 50 }, 20),
		'no cycle: 50 sessions wait');
	my $cpu = cpu_seconds(@pids);
	my $t0 = time;
	RlockTest::wait_until(sub { 0 }, 2);    # 200 looks of each
	my $used = cpu_seconds(@pids) - $cpu;
	cmp_ok($used, '<', 0.2 * (time - $t0) * 50 / 10,
		sprintf('no cycle: 50 waiters looking every 10 ms use %.2f s of CPU in %.1f s',
			$used, time - $t0));
	$c->query_safe('COMMIT');
	my $err = '';
	for my $s (@w)
	{
		my ($o, $e) = RlockTest::collect($s);
		$err .= $e if $e =~ /ERROR/;
	}
	is($err, '', 'no cycle: every waiter gets the lock in turn');
	RlockTest::collect($a);
	is(deadlocks([ @w, @s ]), $before, 'no cycle: no deadlock counted');
	nothing_left('no cycle');
	$_->quit for @w;
}

#---- releases racing the looks ----
{
	my $before = deadlocks(\@s);
	$_->query_safe("SET deadlock_timeout = '10ms'") for @s;
	my $err = '';
	for my $round (1 .. 60)
	{
		$b->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 80");
		$a->query_safe("BEGIN; SELECT rlock_try('dlr:rel')");
		RlockTest::send_query($b, "SELECT rlock_try('dlr:rel', '20 s'); COMMIT;");
		waits($b) if $round % 3 == 0;
		Time::HiRes::usleep(1000 * ($round % 20));
		RlockTest::send_query($a,
			"SELECT rlock_release('dlr:rel'); UPDATE t SET v = v + 1 WHERE id = 80; COMMIT;");
		for my $s ($b, $a)
		{
			my ($o, $e) = RlockTest::collect($s);
			$err .= $e if $e =~ /ERROR/;
		}
	}
	is($err, '', 'release then row wait, 60 rounds: no error');

	$b->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 81");
	RlockTest::send_query($c, "UPDATE t SET v = v + 1 WHERE id = 81;");
	waits($c);
	RlockTest::send_query($_, q{DO $$ BEGIN FOR i IN 1 .. 300 LOOP
		PERFORM rlock_try('dlr:loop', '20 s'); PERFORM rlock_release('dlr:loop');
		END LOOP; END $$;})
	  for $a, $b, $d;
	for my $s ($a, $b, $d)
	{
		my ($o, $e) = RlockTest::collect($s);
		$err .= $e if $e =~ /ERROR/;
	}
	$b->query_safe('COMMIT');
	RlockTest::collect($c);
	is($err, '', 'three sessions taking one key 300 times, a row waiter behind one: no error');
	is(deadlocks(\@s), $before, 'releases racing the looks: no deadlock counted');
	nothing_left('releases racing the looks');
	$_->query_safe('RESET deadlock_timeout') for @s;
}

#---- the holder's row wait cancelled near the confirming look ----
{
	my %seen;
	for (my $ms = 470; $ms <= 650; $ms += 10)
	{
		$b->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 90");
		$a->query_safe("BEGIN; SELECT rlock_try('dlr:to')");
		RlockTest::send_query($a,
			"SET LOCAL statement_timeout = '${ms}ms'; UPDATE t SET v = v + 1 WHERE id = 90; COMMIT;");
		RlockTest::send_query($b, "SELECT rlock_try('dlr:to', '60 s'); COMMIT;");
		my ($ob, $eb) = RlockTest::collect($b);
		my ($oa, $ea) = RlockTest::collect($a);
		my $bs = $eb =~ /ERROR:  (\w{5})/ ? $1 : "got $ob";
		my $as = $ea =~ /ERROR:  (\w{5})/ ? $1 : 'committed';
		$seen{"$bs/$as"}++;
		ok($bs eq 'got t' && $as eq '57014' || $bs eq '40P01',
			"statement_timeout ${ms} ms: the waiter gets the lock or is the victim ($bs/$as)");
	}
	note(join ', ', map { "$_: $seen{$_}" } sort keys %seen);
	nothing_left('statement_timeout near the confirming look');
}

#---- lock_timeout shorter than deadlock_timeout ----
{
	my $before = deadlocks(\@s);
	$b->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 91");
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:lt')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 91; COMMIT;");
	waits($a);
	RlockTest::send_query($b,
		"SET LOCAL lock_timeout = '300ms'; SELECT rlock_lock('dlr:lt'); COMMIT;");
	my ($o, $e) = RlockTest::collect($b);
	like($e, qr/55P03/, 'lock_timeout before deadlock_timeout: 55P03');
	($o, $e) = RlockTest::collect($a);
	unlike($e, qr/ERROR/, 'lock_timeout: the holder commits');
	is(deadlocks(\@s), $before, 'lock_timeout: no deadlock counted');
}

#---- a row held by a prepared transaction ----
{
	my $before = deadlocks(\@s);
	$c->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 60; PREPARE TRANSACTION 'dlr'");
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:prep')");
	RlockTest::send_query($a, "UPDATE t SET v = v + 1 WHERE id = 60; COMMIT;");
	waits($a);
	RlockTest::send_query($b, "BEGIN; SELECT rlock_try('dlr:prep', '60 s'); COMMIT;");
	waits($b);
	RlockTest::wait_until(sub { 0 }, 1.5);    # three deadlock_timeouts
	$c->query_safe("COMMIT PREPARED 'dlr'");
	my ($o, $e) = RlockTest::collect($a);
	unlike($e, qr/ERROR/, 'prepared transaction: the holder goes on after COMMIT PREPARED');
	($o, $e) = RlockTest::collect($b);
	is($o, 't', 'prepared transaction: the waiter gets the lock') or diag($e);
	is(deadlocks(\@s), $before, 'prepared transaction: no deadlock counted');
}

#---- a parallel worker of the holder in the cycle ----
{
	my ($pa, $pb) = ($a->{rlock_pid}, $b->{rlock_pid});
	$b->query_safe("BEGIN; LOCK TABLE u IN ACCESS EXCLUSIVE MODE");
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:par'); SET LOCAL force_parallel_mode = on");
	RlockTest::send_query($a,
		"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count_u(); COMMIT;");
	ok( RlockTest::wait_until(
			sub {
				$node->safe_psql('postgres',
					"SELECT count(*) FROM pg_stat_activity WHERE leader_pid = $pa AND wait_event_type = 'Lock'"
				) == 1;
			},
			10),
		'parallel: the holder\'s worker waits for the table');
	RlockTest::send_query($b, "SELECT rlock_try('dlr:par', '60 s'); COMMIT;");
	my ($o, $e) = RlockTest::collect($b);
	like($e,
		qr/40P01: deadlock detected\nDETAIL:  Process $pb waits for ExclusiveLock on rlock "dlr:par"; blocked by process $pa\.\nProcess $pa waits for AccessShareLock on relation \d+ of database \d+; blocked by process $pb\./,
		'parallel: the cycle through the lock group is found');
	($o, $e) = RlockTest::collect($a);
	like($o, qr/Workers Launched: 1/, 'parallel: the query of the holder ends');
	nothing_left('parallel');
}

#---- a holder elsewhere in the path ----
{
	my $before = deadlocks(\@s);
	$redis->cmd('HSET', 'dlr:remote', $foreign, 1);
	$redis->cmd('PEXPIRE', 'dlr:remote', 2000);
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:chain')");
	RlockTest::send_query($a, "SELECT rlock_try('dlr:remote', '60 s'); COMMIT;");
	waits($a);
	RlockTest::send_query($b, "BEGIN; SELECT rlock_try('dlr:chain', '60 s'); COMMIT;");
	my ($o, $e) = RlockTest::collect($b);
	is($o, 't', 'a holder elsewhere: the chain waits, then goes on') or diag($e);
	($o, $e) = RlockTest::collect($a);
	is($o, 't', 'a holder elsewhere: its waiter gets the lock once it expires');
	is(deadlocks(\@s), $before, 'a holder elsewhere: no deadlock counted');
}

#---- the rlock worker stopped while a cycle exists ----
{
	my $wpid = RlockTest::worker_pid($node);
	my $before = deadlocks(\@s);
	$a->query_safe("BEGIN; SELECT rlock_try('dlr:ws1')");
	$b->query_safe("BEGIN; SELECT rlock_try('dlr:ws2')");
	RlockTest::send_query($a, "SELECT rlock_try('dlr:ws2', '60 s'); COMMIT;");
	RlockTest::waiting_in_sql($node, 'dlr:ws2');
	RlockTest::send_query($b, "SELECT rlock_try('dlr:ws1', '60 s'); COMMIT;");
	RlockTest::waiting_in_sql($node, 'dlr:ws1');
	kill 'STOP', $wpid;
	ok( RlockTest::wait_until(
			sub {
				$_->{run}->pump_nb for $a, $b;
				$a->{stderr} =~ /40P01/ || $b->{stderr} =~ /40P01/;
			},
			10),
		'worker stopped: the cycle is found');
	my ($victim, $other) = $a->{stderr} =~ /40P01/ ? ($a, $b) : ($b, $a);
	RlockTest::collect($victim);
	is($victim->query_safe('SELECT 1'), 1, 'worker stopped: the victim\'s session answers');
	kill 'CONT', $wpid;
	my ($o, $e) = RlockTest::collect($other);
	is($o, 't', 'worker stopped: the other waiter gets the lock once it runs')
	  or diag($e);
	is(RlockTest::worker_pid($node), $wpid, 'worker stopped: the same worker');
	is(deadlocks(\@s), $before + 1, 'worker stopped: one deadlock counted');
	nothing_left('worker stopped');
}

#---- sessions terminated while others look ----
{
	my @w = sessions(20, '10ms');
	for my $round (1 .. 3)
	{
		$c->query_safe("BEGIN; UPDATE t SET v = v + 1 WHERE id = 95");
		my $h = RlockTest::session($node);
		$h->query_safe("BEGIN; SELECT rlock_try('dlr:term')");
		RlockTest::send_query($h, "UPDATE t SET v = v + 1 WHERE id = 95;");
		waits($h);
		RlockTest::send_query($_, "SELECT rlock_try('dlr:term', '20 s');") for @w;
		RlockTest::wait_until(
			sub {
				RlockTest::count_waiting($node, map { $_->{rlock_pid} } @w) == 20;
			},
			20);
		for my $i (0 .. 9)
		{
			$node->safe_psql('postgres',
				"SELECT pg_terminate_backend($w[$i]{rlock_pid})");
			Time::HiRes::usleep(3000 * $i);
		}
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($h->{rlock_pid})");
		my $err = '';
		for my $i (10 .. 19)
		{
			my ($o, $e) = RlockTest::collect($w[$i]);
			$err .= $e if $e =~ /ERROR/;
		}
		is($err, '', "terminated, round $round: the waiters left get the lock");
		for my $i (0 .. 9)
		{
			eval { $w[$i]->quit };
			($w[$i]) = sessions(1, '10ms');
		}
		eval { $h->quit };
		$c->query_safe('COMMIT');
	}
	nothing_left('terminated');
	$_->quit for @w;
}

unlike(slurp_file($node->logfile),
	qr/TRAP:|terminated by signal|PANIC/,
	'no crash or failed assertion in the server log');

$_->quit for @s;
$node->stop;
$redis->stop;
done_testing();
